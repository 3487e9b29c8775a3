"""A summarised evidence block keeps its identity (issue 24 item 1).

When the context policy puts an evidence block behind a pointer, only the node's text is
elided: the block's header (the `--- NODE ---` line, id, path, language, compact,
metadata, `text:`) stays in the prompt, so the responder and the model cite the node whose
text (or summary) they read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from runtime.context.blocks import HEADER, format_block
from runtime.context.pointers import OPEN
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.models.evidence import split_prompt
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.nodestore import open_store

COUNT = """CREATE PROCEDURE Sales.usp_CountOrders
AS
BEGIN
    SELECT COUNT(*) FROM Sales.Orders;
END
"""
_STEPS = "\n".join(
    f"    UPDATE Sales.Orders SET Status = {k} WHERE OrderId = @OrderId AND Step = {k};"
    for k in range(120)
)
PLACE = f"""CREATE PROCEDURE Sales.usp_PlaceOrder
    @OrderId INT
AS
BEGIN
    INSERT INTO Sales.Orders (OrderId, Status) VALUES (@OrderId, 0);
{_STEPS}
END
"""
PLACE_ID = "shop::main::procedure::Sales.usp_PlaceOrder"
COUNT_ID = "shop::main::procedure::Sales.usp_CountOrders"


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """Two procedures: a short one that reads Sales.Orders, a long one that writes it."""
    root = tmp_path_factory.mktemp("shop")
    (root / "src" / "sql").mkdir(parents=True)
    (root / "src" / "sql" / "usp_CountOrders.sql").write_text(COUNT)
    (root / "src" / "sql" / "usp_PlaceOrder.sql").write_text(PLACE)
    store = open_store(str(root / "index.db"), create=True)
    index_paths(store, [str(root / "src")], repository="shop")
    return store


def _run(tmp_path: Path, store: Any, question: str, window: int, part: dict[str, Any]):
    """search -> fetch -> budget -> answer on the extractive responder, a small window."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "answer.md").write_text("You answer from the evidence.\n")
    model = {"provider": "extractive", "context_window": window}
    data = {
        "settings": {
            "entry_step_id": "search",
            "max_context_tokens": 6000,
            "models": {"small": model},
            "context_policy": {"enabled": True},
        },
        "steps": [
            {"id": "search", "action": "search_nodes", "query_from": "question", "next": "fetch"},
            {"id": "fetch", "action": "fetch_node_texts", "next": "budget"},
            {
                "id": "budget",
                "action": "manage_context_budget",
                "on_ok": "answer",
                "on_over": "answer",
            },
            {
                "id": "answer",
                "action": "call_model",
                "prompt_key": "answer",
                "model": "small",
                "max_output_tokens": 256,
                "user_parts": {"q": {"source": "question", "template": "Question: {}"}, "ev": part},
                "next": "end",
            },
            {"id": "end", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=p.settings, base_dir=str(tmp_path), node_store=store)
    return Engine(p, services=services).run({"question": question}, run_id="t")


def _sent_user(result) -> str:
    [call] = [e for e in result.events if e["type"] == "MODEL_CALL"]
    return call["messages"][-1]["content"]


def _cited(answer: str) -> dict[str, list[str]]:
    """node id -> the lines the extractive answer quotes under it."""
    out: dict[str, list[str]] = {}
    current = None
    for line in answer.splitlines():
        m = re.match(r"^\d+\. \[(.+?)\]", line)
        if m:
            current = out.setdefault(m.group(1), [])
        elif current is not None and line.startswith("   > "):
            current.append(line[5:])
    return out


def test_the_responder_cites_the_node_whose_summarised_text_it_quotes(tmp_path, shop):
    result = _run(
        tmp_path,
        shop,
        "Which procedure writes Sales.Orders?",
        1500,
        {"source": "context_blocks"},
    )
    assert result.status == "completed", result.error
    [decision] = [e for e in result.events if e["type"] == "CONTEXT_BUDGET_DECISION"]
    assert decision["decision"] == "needs_summary" and decision["summarised"]
    user = _sent_user(result)
    assert OPEN in user
    # The elided block is still a block of its node: its header, then the pointer.
    blocks = {b.id: b for b in split_prompt(user).blocks}
    assert set(blocks) == {PLACE_ID, COUNT_ID}
    assert blocks[PLACE_ID].text.startswith(OPEN) and OPEN not in blocks[COUNT_ID].text
    assert "usp_PlaceOrder" not in blocks[COUNT_ID].text
    cited = _cited(result.state["last_model_response"])
    assert next(iter(cited)) == PLACE_ID  # the procedure that writes Sales.Orders, first
    place_source = PLACE + blocks[PLACE_ID].text
    for node, quoted in cited.items():
        source = place_source if node == PLACE_ID else COUNT
        for line in quoted:
            assert line in source, (node, line)


def test_a_block_read_from_one_string_keeps_its_header_and_the_delimiter(tmp_path, shop):
    """Blocks joined into one string (a user part whose source is text) are segmented too:
    each block's text alone is summarised, inside the evidence delimiter."""
    long_note = "\n".join(f"Step {k} updates the order status in Sales.Orders." for k in range(300))
    joined = "\n\n".join(
        [
            format_block({"id": "doc::short", "path": "short.md", "text": "Orders are counted."}),
            format_block({"id": "doc::long", "path": "long.md", "text": long_note}),
        ]
    )
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "answer.md").write_text("You answer from the evidence.\n")
    data = {
        "settings": {
            "entry_step_id": "answer",
            "models": {"small": {"provider": "extractive", "context_window": 1200}},
            "context_policy": {"enabled": True},
        },
        "steps": [
            {
                "id": "answer",
                "action": "call_model",
                "prompt_key": "answer",
                "model": "small",
                "max_output_tokens": 256,
                "user_parts": {
                    "q": {"source": "question", "template": "Question: {}"},
                    "ev": {"source": "evidence"},
                },
                "next": "end",
            },
            {"id": "end", "action": "finalize", "source": "last_model_response"},
        ],
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    services = Services(settings=p.settings, base_dir=str(tmp_path))
    result = Engine(p, services=services).run(
        {"question": "How is the order status updated?", "evidence": joined}, run_id="t"
    )
    assert result.status == "completed", result.error
    user = _sent_user(result)
    inside = user[user.index("<evidence>") : user.index("</evidence>")]
    assert OPEN in inside and user.count("<evidence>") == 1
    assert inside.count(HEADER) == 2
    blocks = {b.id: b for b in split_prompt(user).blocks}
    assert blocks["doc::long"].text.startswith(OPEN)
    assert blocks["doc::short"].text == "Orders are counted."


def test_split_block_keeps_every_header_line_outside_the_text():
    from runtime.context.blocks import split_block

    block = format_block(
        {"id": "n1", "path": "a/b.sql", "language": "sql", "text": "line 1\ntext:\nline 3"},
        compact=True,
        metadata={"kind": "procedure", "lines": "3-9"},
    )
    head, text = split_block(block)
    assert head + text == block and text == "line 1\ntext:\nline 3"
    assert head.startswith(HEADER) and head.endswith("\ntext:\n")
    assert "id: n1" in head and "lines: 3-9" in head and "compact: true" in head
    # A string that is no block has no header; a block with empty text, an empty text.
    assert split_block("=== new evidence ===") == ("", "=== new evidence ===")
    empty = format_block({"id": "n2", "text": ""})
    assert split_block(empty) == (empty, "")
