"""verify_answer on the sample's questions, with planted faults (issue 29).

    python benchmarks/verify_faults.py [--write]

Runs pipelines/code_qa.yaml offline (the extractive responder) over the 30 questions of
tests/data/retrieval/questions.json on the indexed sample (pipelines/sample/eshop), keeps
each answer and what the answer step was shown (`answer_shown`), and builds from each:
two correct answers (the extractive one, and a prose one citing a shown node per
sentence) and three faulty ones, each with one planted fault: a citation of a node of
the index that was not shown, a claim with no citation, a pointer that was not shown.
Every fault must be found and no correct answer flagged. `--write` keeps the set in
tests/data/verifier/sample_answers.json (tests/actions/test_verify_answer_sample.py
re-checks it).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import runtime  # noqa: E402
from runtime.models.citations import verify  # noqa: E402
from runtime.retrieval.indexer import index_paths  # noqa: E402
from runtime.retrieval.nodestore import open_store  # noqa: E402

OUT = ROOT / "tests" / "data" / "verifier" / "sample_answers.json"


def build() -> list[dict]:
    """The set: per question, the shown record and the five answers with their labels."""
    questions = json.loads((ROOT / "tests/data/retrieval/questions.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "index.db"), create=True)
        index_paths(store, [str(ROOT / "pipelines/sample/eshop")], repository="eshop")
        every = sorted(r[0] for r in store.conn().execute("SELECT id FROM nodes").fetchall())
        pipeline = runtime.load(str(ROOT / "pipelines/code_qa.yaml"))
        cases = []
        for q in questions:
            services = runtime.Services(
                settings=pipeline.settings, node_store=store, base_dir=str(pipeline.base_dir)
            )
            result = runtime.Runner(pipeline, services=services).run({"question": q["q"]})
            shown = result.state.get("answer_shown")
            if result.status != "completed" or not shown or not shown["items"]:
                continue
            ids = [i["id"] for i in shown["items"]]
            hidden = next(n for n in every if n not in ids)
            first = ids[0]
            name = first.split("::")[-1]
            prose = " ".join(f"{i.split('::')[-1]} is part of the answer [{i}]." for i in ids[:3])
            cases.append(
                {
                    "question": q["q"],
                    "shown": shown,
                    "answers": [
                        {"label": "correct", "text": result.state["last_model_response"]},
                        {"label": "correct", "text": prose},
                        {
                            "label": "unknown_citation",
                            "text": prose + f" It also calls {hidden.split('::')[-1]} [{hidden}].",
                        },
                        {
                            "label": "unsupported",
                            "text": prose + f" {name} writes dbo.AuditLog.",
                        },
                        {
                            "label": "unknown_citation",
                            "text": prose + " The rest is in [ptr-00000000deadbeef lines 1-20].",
                        },
                    ],
                }
            )
    return cases


def score(cases: list[dict]) -> dict:
    """Faults found and false alarms over the set."""
    found = faults = alarms = correct = 0
    misses = []
    for case in cases:
        for a in case["answers"]:
            verdict = verify(a["text"], case["shown"])
            if a["label"] == "correct":
                correct += 1
                if not verdict["ok"]:
                    alarms += 1
                    misses.append(
                        (
                            "false alarm",
                            case["question"],
                            verdict["unsupported"],
                            verdict["unknown_citations"],
                        )
                    )
            else:
                faults += 1
                hit = (
                    verdict["unsupported"]
                    if a["label"] == "unsupported"
                    else verdict["unknown_citations"]
                )
                if hit and len(hit) == 1:
                    found += 1
                else:
                    misses.append(("missed", case["question"], a["label"]))
    return {
        "questions": len(cases),
        "faults": faults,
        "found": found,
        "correct_answers": correct,
        "false_alarms": alarms,
        "misses": misses,
    }


if __name__ == "__main__":
    cases = build()
    if "--write" in sys.argv:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(score(cases), indent=1))
