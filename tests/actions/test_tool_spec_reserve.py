"""The first request of a step offering tools reserves room for the tool specs (issue 29):
the messages get the prompt budget less the specs' tokens (the real tokenizer's count), so
the messages plus the specs never exceed the budget. At the limit: a budget one token under
messages + specs changes what is sent (a block summarised, or CONTEXT_OVERFLOW)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from runtime.context.blocks import format_block
from runtime.context.tokens import get_counter
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

COUNT = get_counter("cl100k_base").count
BLOCKS = [
    format_block(
        {
            "id": f"shop::main::procedure::dbo.usp_Step{n}",
            "path": f"sql/usp_Step{n}.sql",
            "language": "sql",
            "text": f"CREATE PROCEDURE dbo.usp_Step{n} AS\n"
            + "\n".join(f"    UPDATE dbo.T{n} SET C{i} = {i};" for i in range(40)),
        }
    )
    for n in range(3)
]


def run(
    tmp_path: Path,
    policy: dict[str, Any],
    tools: Any = ("search_nodes",),
    summarizable: bool = True,
    window: int | None = None,
) -> Any:
    """One call_model step offering `tools`, the question and three evidence blocks."""
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "sys.md").write_text("Answer from the evidence.")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"ask": [{"text": "done"}]}))
    data = {
        "settings": {
            "entry_step_id": "ask",
            "context_policy": policy,
            **(
                {"models": {"m": {"provider": "extractive", "context_window": window}}}
                if window
                else {}
            ),
        },
        "steps": [
            {
                "id": "ask",
                "action": "call_model",
                "prompt_key": "sys",
                "max_output_tokens": 100,
                **({"model": "m"} if window else {}),
                **({"tools": list(tools)} if tools else {}),
                "user_parts": {
                    "q": {"source": "question", "template": "Question: {}"},
                    "e": {"source": "context_blocks", "summarizable": summarizable},
                },
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "last_model_response"},
        ],
    }
    pipeline = Pipeline.from_dict(data, file=str(tmp_path / "p.yaml"))
    spec = None if window else f"scripted:{script}"  # a spec given wins over the step's
    services = Services(settings=pipeline.settings, base_dir=str(tmp_path), model_spec=spec)
    inputs = {"question": "What do the steps update?", "context_blocks": BLOCKS}
    return Engine(pipeline, services=services).run(inputs, run_id="spec-run")


def first(result: Any, kind: str) -> dict[str, Any]:
    return next(e for e in result.events if e["type"] == kind)


def sizes(tmp_path: Path) -> tuple[int, int]:
    """(the messages' exact tokens, the specs' tokens) with room to spare."""
    result = run(tmp_path, {"enabled": True, "prompt_budget": 100_000})
    assert result.status == "completed", result.error
    decision = first(result, "CONTEXT_BUDGET_DECISION")
    assert decision["summarised"] == []
    specs = sum(t["tokens"] for t in first(result, "TOOLS_OFFERED")["tools"])
    return decision["sent_tokens"], specs


def test_the_specs_are_counted_with_the_real_tokenizer(tmp_path):
    from actions._tools import resolve

    _, specs = sizes(tmp_path)
    (tool,) = resolve(["search_nodes"])
    assert specs == COUNT(json.dumps(tool.spec(), sort_keys=True)) > 50


def test_messages_plus_specs_exactly_at_the_budget_are_sent_whole(tmp_path):
    prompt, specs = sizes(tmp_path)
    result = run(tmp_path, {"enabled": True, "prompt_budget": prompt + specs})
    assert result.status == "completed", result.error
    decision = first(result, "CONTEXT_BUDGET_DECISION")
    assert decision["summarised"] == [] and decision["sent_tokens"] == prompt
    assert decision["tool_spec_tokens"] == specs
    assert decision["messages_budget"] == prompt and decision["budget"] == prompt + specs
    pack = result.packs[0]
    assert pack["tokens"]["tool_specs"] == specs
    assert pack["tokens"]["prompt"] + pack["tokens"]["tool_specs"] <= pack["prompt_budget"]


def test_one_token_of_spec_over_the_budget_changes_what_is_sent(tmp_path):
    prompt, specs = sizes(tmp_path)
    # The messages alone still fit: only the specs' room makes the policy summarise a block.
    result = run(tmp_path, {"enabled": True, "prompt_budget": prompt + specs - 1})
    assert result.status == "completed", result.error
    decision = first(result, "CONTEXT_BUDGET_DECISION")
    assert decision["summarised"] and decision["sent_tokens"] + specs <= prompt + specs - 1
    assert decision["sent_tokens"] < prompt
    pack = result.packs[0]
    assert pack["tokens"]["prompt"] + pack["tokens"]["tool_specs"] <= pack["prompt_budget"]


def test_without_a_summary_to_make_a_spec_over_is_a_context_overflow_naming_the_specs(tmp_path):
    prompt, specs = sizes(tmp_path)
    policy = {"enabled": True, "prompt_budget": prompt + specs - 1}
    result = run(tmp_path, policy, summarizable=False)  # nothing may be summarised
    assert result.status == "failed" and result.error.code == "CONTEXT_OVERFLOW"
    assert f"{specs} for the tool specs offered" in result.error.message
    # The same messages without the tool fit: the specs alone made the difference.
    assert run(tmp_path, policy, tools=(), summarizable=False).status == "completed"


def test_a_dry_run_refuses_messages_that_fit_only_without_the_specs(tmp_path):
    # The extractive responder with a set window: a dry run sends the prompt as assembled,
    # and still checks the window, the specs' room included.
    probe = run(tmp_path, {"enabled": True, "dry_run": True}, window=100_000)
    assert probe.status == "completed", probe.error
    prompt = first(probe, "CONTEXT_BUDGET_DECISION")["sent_tokens"]
    specs = sum(t["tokens"] for t in first(probe, "TOOLS_OFFERED")["tools"])
    fits = run(tmp_path, {"enabled": True, "dry_run": True}, window=prompt + specs + 100)
    assert fits.status == "completed", fits.error
    over = run(tmp_path, {"enabled": True, "dry_run": True}, window=prompt + specs + 99)
    assert over.status == "failed" and over.error.code == "CONTEXT_OVERFLOW"
    assert f"+ {specs} of tool specs" in over.error.message
