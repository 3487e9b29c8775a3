"""Pointers are reachable from YAML (issue 24 item 7).

A user part's `pointer_to` gets the pointer its value went behind, so a later `rehydrate`
step brings the original back with no hash in the YAML; a pointer block tells the model
to rehydrate only when the step offers the tool; `validate` warns when a policy step may
elide and offers no way back (POLICY_NO_WAY_BACK).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from runtime.context import policy as pol
from runtime.context.pointers import OPEN, MemoryPointerStore, pointer_id_of
from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline
from runtime.format.validation import validate_paths

COUNTER = get_counter()
DOC = "".join(f"line {i}: the quick brown fox number {i} jumps over the dog.\n" for i in range(600))


def run(tmp_path, *, step: dict[str, Any] | None = None, doc: str = DOC, policy=None, extra=()):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the document.\n")
    steps: list[dict[str, Any]] = [
        {
            "id": "ask",
            "action": "call_model",
            "prompt_key": "sys",
            "model": "small",
            "max_output_tokens": 256,
            "user_parts": {
                "q": {"source": "question"},
                "doc": {"source": "doc", "pointer_to": "doc_pointer"},
            },
            "next": extra[0]["id"] if extra else "f",
            **(step or {}),
        },
        *extra,
        {"id": "f", "action": "finalize", "source": "last_model_response"},
    ]
    data = {
        "settings": {
            "entry_step_id": "ask",
            "models": {
                "small": {"provider": "extractive", "context_window": 2048},
                "big": {"provider": "extractive", "context_window": 32000},
            },
            "context_policy": policy if policy is not None else {"enabled": True},
        },
        "steps": steps,
    }
    p = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    engine = Engine(p, services=Services(settings=p.settings, base_dir=str(tmp_path)))
    return engine.run({"question": "which fox?", "doc": doc}, run_id="t")


def test_a_rehydrate_step_reads_the_pointer_a_part_went_behind_no_hash_in_the_yaml(tmp_path):
    quote = {
        "id": "quote",
        "action": "rehydrate",
        "pointer_id_from": "doc_pointer",
        "slice": "lines 5-6",
        "target": "quoted",
        "next": "f",
    }
    r = run(tmp_path, extra=[quote])
    assert r.status == "completed", r.error
    record = r.state["doc_pointer"]
    assert record == {
        "pointer_id": pointer_id_of(DOC)[0],
        "kind": "text",
        "chars": len(DOC),
        "lines": 600,
        "tokens_before": record["tokens_before"],
        "tokens_after": record["tokens_after"],
    }
    assert record["tokens_after"] < record["tokens_before"]
    assert r.state["quoted"] == "".join(DOC.splitlines(keepends=True)[4:6])


@pytest.mark.parametrize(
    ("doc", "policy"),
    [
        ("a short document", {"enabled": True}),
        (DOC, {"enabled": True, "dry_run": True, "prompt_budget": 1500}),
    ],
)
def test_a_part_sent_whole_or_a_dry_run_writes_null(tmp_path, doc, policy):
    r = run(
        tmp_path, doc=doc, policy=policy, step={"model": "big"} if policy.get("dry_run") else {}
    )
    assert r.status == "completed", r.error
    assert r.state["doc_pointer"] is None


def test_an_evidence_part_gets_the_list_of_its_summarised_blocks(tmp_path):
    from runtime.context.blocks import format_block

    blocks = [
        format_block({"id": f"n{i}", "path": f"f{i}.txt", "text": DOC[:4000]}) for i in range(4)
    ]
    r = run(
        tmp_path,
        step={"user_parts": {"ev": {"source": "doc", "pointer_to": "ev_pointers"}}},
        doc=blocks,  # type: ignore[arg-type]
    )
    assert r.status == "completed", r.error
    [d] = [e for e in r.events if e["type"] == "CONTEXT_BUDGET_DECISION"]
    got = r.state["ev_pointers"]
    assert [g["block"] for g in got] == [int(s["id"][-2]) for s in d["summaries"]]
    assert [g["pointer_id"] for g in got] == d["summarised"] and got


def test_a_block_tells_the_model_to_rehydrate_only_when_the_step_offers_the_tool(tmp_path):
    without = run(tmp_path)
    call = next(e for e in without.events if e["type"] == "MODEL_CALL")
    user = call["messages"][-1]["content"]
    head = user[user.index(OPEN) :].splitlines()[0]
    assert (
        head == f"{OPEN} {pointer_id_of(DOC)[0]}: text, {len(DOC):,} chars, 600 lines, summarised]"
    )
    offered = run(tmp_path, step={"tools": ["rehydrate"]})
    calls = [e for e in offered.events if e["type"] == "MODEL_CALL"]
    user = calls[0]["messages"][1]["content"]
    assert "rehydrate this pointer_id for the exact text" in user


@pytest.mark.parametrize("way_back", [True, False])
def test_a_compacted_turn_says_rehydrate_only_with_the_tool(way_back):
    thread = [
        pol.PromptMessage("user", [pol.Segment("user[0]", "question", False)]),
        pol.PromptMessage("assistant", [pol.Segment("assistant[1]", DOC[:3000])]),
    ]
    out = pol.compact_thread(
        thread,
        200,
        COUNTER,
        store=MemoryPointerStore(),
        run_id="r",
        overhead=4,
        way_back=way_back,
    )
    assert out.entries
    shown = thread[1].content()
    assert shown.startswith(OPEN) and ("rehydrate it]" in shown) is way_back


def write(tmp_path: Path, step_extra: str = "", steps_extra: str = "") -> Path:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "a.md").write_text("Answer.\n")
    text = textwrap.dedent(
        """\
        name: reach
        settings:
          entry_step_id: ask
          models:
            small: {provider: extractive, context_window: 8192}
          context_policy: {enabled: true}
        inputs:
          question: {type: string, maxLength: 200}
          doc: {type: string}
        steps:
          - id: ask
            action: call_model
            prompt_key: a
            model: small
            user_parts:
              q: {source: question}
              doc: {source: doc%s}
            next: done
        %s
          - id: done
            action: finalize
            source: last_model_response
        """
    ) % (step_extra, steps_extra)
    path = tmp_path / "reach.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def way_back(path: Path) -> list[tuple[str, int]]:
    report = validate_paths([str(path)])
    return [(d.code, d.line) for d in report.diagnostics if d.code == "POLICY_NO_WAY_BACK"]


def test_validate_warns_when_a_policy_step_may_elide_with_no_way_back(tmp_path):
    [(_, line)] = way_back(write(tmp_path))
    assert line == 11
    report = validate_paths([str(write(tmp_path))])
    [diag] = [d for d in report.diagnostics if d.code == "POLICY_NO_WAY_BACK"]
    assert diag.severity == "warning" and "user_parts.doc" in diag.message


def test_the_tool_or_a_rehydrate_step_reading_pointer_to_is_a_way_back(tmp_path):
    tool = (
        write(tmp_path)
        .read_text()
        .replace("    next: done", "    tools: [rehydrate]\n    next: done", 1)
    )
    (tmp_path / "tool.yaml").write_text(tool)
    assert way_back(tmp_path / "tool.yaml") == []
    step = """\
  - id: quote
    action: rehydrate
    pointer_id_from: doc_pointer
    target: quoted
    next: done"""
    reached = write(tmp_path, ", pointer_to: doc_pointer", step).read_text()
    reached = reached.replace("    next: done\n\n  - id: quote", "    next: quote\n\n  - id: quote")
    (tmp_path / "step.yaml").write_text(reached)
    assert way_back(tmp_path / "step.yaml") == []
    # pointer_to that no rehydrate step reads is no way back.
    assert way_back(write(tmp_path, ", pointer_to: doc_pointer")) == [("POLICY_NO_WAY_BACK", 11)]
