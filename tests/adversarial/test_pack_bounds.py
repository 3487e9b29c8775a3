"""A context pack stays bounded and holds no prompt text, whatever the prompt (docs/packs.md).

Hostile or huge prompts: thousands of evidence blocks, a 200 KB node id, a 200 KB
question, a key in the query. The pack keeps at most MAX_ITEMS items (the rest counted),
cuts ids and queries at MAX_FIELD characters, and holds hashes and counts, not text.
"""

from __future__ import annotations

from typing import Any

from runtime.context import packs
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline


def run(tmp_path, inputs: dict[str, Any]):
    return run_parts(tmp_path, inputs, {"q": {"source": "question"}, "e": {"source": "blocks"}})


def run_parts(tmp_path, inputs: dict[str, Any], parts: dict[str, Any]):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer.\n")
    data = {
        "settings": {
            "entry_step_id": "ask",
            "models": {"big": {"provider": "extractive", "context_window": 4_000_000}},
        },
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "model": "big",
                "user_parts": parts,
                "next": "f",
            },
            {"id": "f", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    r = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path))).run(
        inputs, run_id="t"
    )
    assert r.status == "completed", r.error
    [pack] = r.packs
    return pack


def block(node: str, text: str) -> str:
    return f"--- NODE ---\nid: {node}\ntext:\n{text}"


def test_thousands_of_blocks_keep_a_bounded_pack(tmp_path):
    blocks = [block(f"n{i}", f"secret-ish text {i} " * 5) for i in range(packs.MAX_ITEMS + 500)]
    pack = run(tmp_path, {"question": "q?", "blocks": blocks})
    kept = sum(len(s["items"]) for s in pack["sections"])
    assert kept == packs.MAX_ITEMS
    # The system prompt, the question, the fidelity preamble and 997 blocks; the rest counted.
    assert pack["items_omitted"] == len(blocks) + 3 - packs.MAX_ITEMS
    knowledge = next(s for s in pack["sections"] if s["type"] == "knowledge")
    # Every block's tokens are counted, kept as an item or not.
    assert knowledge["tokens"] >= len(blocks) * 10
    body = packs.canonical_bytes(pack)
    assert len(body) < 400 * packs.MAX_ITEMS and b"secret-ish" not in body


def test_a_200_kb_node_id_and_question_stay_out_of_the_pack(tmp_path):
    huge = "x y " * 50_000  # 200 KB (spaced: the tokenizer is slow on one long word)
    node = "n" + huge.replace(" ", "_")
    pack = run(tmp_path, {"question": "why " + huge, "blocks": [block(node, "text")]})
    body = packs.canonical_bytes(pack)
    assert len(body) < 20_000
    [item] = next(s for s in pack["sections"] if s["type"] == "knowledge")["items"]
    assert item["id"].startswith("nx_y_") and len(item["id"]) < packs.MAX_FIELD + 40
    user = next(s for s in pack["sections"] if s["type"] == "user")
    assert user["tokens"] > 50_000  # counted whole, stored as a count and a hash


def test_drops_past_the_cap_are_counted_not_kept():
    b = packs.PackBuilder(run_id="r", step_id="s", model="m", prompt_budget=100)
    for i in range(packs.MAX_DROPS + 7):
        b.drop(f"n{i}" * 1000, "budget_skip", 3)
    pack = b.finish([], 0)
    assert len(pack["drops"]["items"]) == packs.MAX_DROPS
    assert pack["drops"]["omitted"] == 7
    assert all(len(d["id"]) <= packs.MAX_FIELD + 20 for d in pack["drops"]["items"])


def test_a_forged_assembly_record_in_state_keeps_the_pack_bounded(tmp_path):
    # Any step can write state: a record shaped like assemble_context's, with huge and
    # ill-typed fields, read through its markdown, gives a bounded pack and no error.
    huge = "x" * 200_000
    items = [
        {
            "id": huge + str(i),
            "source": huge,
            "kind": "memory",
            "tokens": "many",
            "score": "high",
            "labels": [huge, 1],
            "location": huge,
            "truncated": True,
            "full_tokens": -5,
            "pointer_id": huge,
        }
        for i in range(packs.MAX_ITEMS + 50)
    ]
    items.append(
        {
            "id": "ok",
            "source": "s",
            "kind": "code",
            "tokens": 7,
            "score": 0.5,
            "labels": ["internal"] * 500,
        }
    )
    dropped = [{"id": huge, "source": huge, "reason": huge, "tokens": 2.5}] * 20
    record = {"markdown": "some markdown", "items": items, "dropped": dropped}
    data = {"question": "q?", "evil": record, "evil_markdown": "some markdown"}
    pack = run_parts(
        tmp_path, data, {"q": {"source": "question"}, "e": {"source": "evil_markdown"}}
    )
    body = packs.canonical_bytes(pack)
    assert len(body) < 2_000_000  # 1,000 items of five fields cut at 200 characters
    kept = [i for s in pack["sections"] for i in s["items"]]
    assert len(kept) == packs.MAX_ITEMS and pack["items_omitted"] > 0
    for item in kept:
        assert all(len(str(v)) <= packs.MAX_FIELD + 40 for k, v in item.items() if k != "labels")
        assert item.get("score") is None or isinstance(item["score"], float)
        assert item.get("labels") is None or len(item["labels"]) <= 50
    for d in pack["drops"]["items"]:
        assert d["tokens_saved"] is None and len(d.get("note", "")) <= packs.MAX_FIELD + 40
