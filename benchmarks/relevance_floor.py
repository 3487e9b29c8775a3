"""What a relevance floor keeps of the evidence code_qa really sends (issue 29).

Run: python benchmarks/relevance_floor.py

The sample's 30 questions (tests/data/retrieval/questions.json, each with the node ids
that answer it, written before this benchmark) go through pipelines/code_qa.yaml offline
(the extractive responder) over the sample index. For the evidence blocks the answer step
was given, and floors from 0.1 to 0.5, it prints: the expected blocks kept (of those
retrieved), the other blocks dropped (of the others), and the questions left with no
evidence at all (the minimal safe context). Relevance is actions/_evidence_guard.py's:
the share of the question's informative stems a block holds.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import runtime  # noqa: E402
from actions._evidence_guard import relevance  # noqa: E402
from runtime.context.blocks import block_id  # noqa: E402
from runtime.retrieval.indexer import index_paths  # noqa: E402
from runtime.retrieval.nodestore import open_store  # noqa: E402
from runtime.retrieval.query import question_stems  # noqa: E402

FLOORS = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5)


def evidence(tmp: Path) -> list[tuple[str, list[str], list[tuple[str, float]]]]:
    """(question, expected ids, [(block id, relevance)]) of each question's answer step."""
    questions = json.loads((ROOT / "tests" / "data" / "retrieval" / "questions.json").read_text())
    store = open_store(str(tmp / "sample.db"), create=True)
    index_paths(store, [str(ROOT / "pipelines" / "sample" / "eshop")], repository="eshop")
    code_qa = runtime.load(str(ROOT / "pipelines" / "code_qa.yaml"))
    out = []
    for item in questions:
        services = runtime.Services(
            settings=code_qa.settings,
            node_store=store,
            model_spec="extractive",
            base_dir=str(code_qa.base_dir),
        )
        result = runtime.Runner(code_qa, services=services).run({"question": item["q"]})
        blocks = result.state.get("context_blocks") or []
        stems = question_stems(item["q"])
        scored = [(block_id(b) or "?", relevance(stems, b)) for b in blocks]
        out.append((item["q"], item["expect"], scored))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = evidence(Path(tmp))
    expected = [(q, s) for q, exp, blocks in rows for nid, s in blocks if nid in exp]
    others = [(q, s) for q, exp, blocks in rows for nid, s in blocks if nid not in exp]
    print(
        f"{len(rows)} questions, {len(expected) + len(others)} evidence blocks sent to the "
        f"answer step: {len(expected)} expected, {len(others)} others; "
        f"{sum(1 for _, _, b in rows if not b)} questions with none"
    )
    print("floor | expected kept | others dropped | questions left with no evidence")
    for floor in FLOORS:
        kept = sum(1 for _, s in expected if s >= floor)
        dropped = sum(1 for _, s in others if s < floor)
        empty = sum(1 for _, _, b in rows if b and all(s < floor for _, s in b))
        print(
            f"{floor:>5} | {kept}/{len(expected)} ({kept / max(len(expected), 1):.0%}) | "
            f"{dropped}/{len(others)} ({dropped / max(len(others), 1):.0%}) | {empty}"
        )
    if "-v" in sys.argv:
        for q, exp, blocks in rows:
            for nid, s in blocks:
                if nid in exp:
                    print(f"expected {s:.2f} {nid} <- {q}")


if __name__ == "__main__":
    main()
