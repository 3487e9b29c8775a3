"""verify_answer on the kept set of the sample's answers (benchmarks/verify_faults.py):
every planted fault found, no correct answer flagged."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.models.citations import verify

SET = Path(__file__).resolve().parent.parent / "data" / "verifier" / "sample_answers.json"


def test_every_planted_fault_is_found_and_no_correct_answer_is_flagged():
    cases = json.loads(SET.read_text(encoding="utf-8"))
    assert len(cases) == 30
    labels = []
    for case in cases:
        for answer in case["answers"]:
            verdict = verify(answer["text"], case["shown"])
            labels.append(answer["label"])
            if answer["label"] == "correct":
                assert verdict["ok"], (case["question"], verdict)
            elif answer["label"] == "unsupported":
                assert len(verdict["unsupported"]) == 1 and not verdict["unknown_citations"]
            else:
                assert len(verdict["unknown_citations"]) == 1 and not verdict["unsupported"]
    assert labels.count("correct") == 60 and len(labels) == 150
