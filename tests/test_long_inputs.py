"""Done-when of issue 17: pipelines/long_inputs.yaml feeds a novel and a 5 MB JSON tool
output into one call on an 8k-window model, offline (extractive responder, then the
checked-in cassette); the trace shows the decision, summaries and pointers; the rehydrate
tool and a rehydrate step each bring back an exact slice; no prompt goes over its budget;
and validation warns about the unbounded parts of the variant without a policy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import cli
from runtime.context.pointers import pointer_id_of
from runtime.context.tokens import get_counter
from runtime.format.validation import validate_paths

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "pipelines" / "long_inputs.yaml"
UNGUARDED = ROOT / "pipelines" / "long_inputs_unguarded.yaml"
sys.path.insert(0, str(ROOT / "benchmarks"))

import long_inputs  # noqa: E402  (the benchmark's data, found through the path above)


def lines(text: str, first: int, last: int) -> str:
    """Lines first..last of text with their line ends, counted independently of pointers.py."""
    return "".join(line + "\n" for line in text.split("\n")[first - 1 : last])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("long_inputs")
    path = folder / "inputs.json"
    data = {
        "question": long_inputs.QUESTION,
        "novel": long_inputs.novel(),
        "tool_output": long_inputs.json_document(5 * long_inputs.MB),
    }
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def execute(inputs: Path, tmp_path: Path, pipeline: Path = PIPELINE, *extra: str):
    """Run the pipeline through the CLI with a store; (exit code, result, trace events)."""
    store = tmp_path / "runs.db"
    args = ["exec", str(pipeline), "--inputs", str(inputs), "--max-input-bytes", "8000000"]
    args += ["--store", str(store), "--run-id", "r1", "--json", *extra]
    result = CliRunner().invoke(cli, args)
    trace = CliRunner().invoke(cli, ["trace", "r1", "--store", str(store), "--format", "jsonl"])
    assert trace.exit_code == 0, trace.output
    events = [json.loads(line) for line in trace.stdout.splitlines()]
    return result.exit_code, json.loads(result.stdout), events


def test_validate_warns_about_the_unbounded_parts_before_a_run():
    guarded = validate_paths([str(PIPELINE)])
    assert guarded.errors == 0
    assert [d for d in guarded.diagnostics if d.code.startswith("BUDGET")] == []  # its policy
    report = validate_paths([str(UNGUARDED)])
    assert report.errors == 0
    (warning,) = [d for d in report.diagnostics if d.code.startswith("BUDGET")]
    assert (warning.code, warning.severity) == ("BUDGET_MAY_OVERFLOW", "warning")
    assert (Path(warning.file).name, warning.line) == ("long_inputs.yaml", 24)  # `id: answer`
    assert "user_parts.novel (input novel has no maxLength)" in warning.message
    assert "user_parts.data (input tool_output has no maxLength)" in warning.message


def test_the_unguarded_variant_overflows_as_warned(inputs, tmp_path):
    code, result, _ = execute(inputs, tmp_path, UNGUARDED)
    assert code == 1 and result["error"]["code"] == "CONTEXT_OVERFLOW"


def check_run(code: int, result: dict, events: list[dict]) -> None:
    """Everything the done-when asks of one run of pipelines/long_inputs.yaml."""
    novel = long_inputs.novel()
    data = long_inputs.json_document(5 * long_inputs.MB)
    assert code == 0 and result["status"] == "completed", result
    # The decision: both payloads behind pointers, the prompt within its budget.
    (decision,) = [e for e in events if e["type"] == "CONTEXT_BUDGET_DECISION"]
    assert decision["decision"] == "needs_summary" and decision["dry_run"] is False
    assert decision["budget"] == 8192 - 400 and decision["prompt_tokens"] <= decision["budget"]
    summaries = {s["id"]: s for s in decision["summaries"]}
    assert set(summaries) == {"user_parts.novel", "user_parts.data"}
    novel_id, data_id = pointer_id_of(novel)[0], pointer_id_of(data)[0]
    assert summaries["user_parts.novel"]["pointer_id"] == novel_id
    assert summaries["user_parts.data"]["pointer_id"] == data_id
    assert [summaries[k]["kind"] for k in sorted(summaries)] == ["json", "text"]
    assert all(s["tokens_after"] < 300 for s in summaries.values())
    # The prompt holds the pointer blocks, not the payloads.
    (call,) = [e for e in events if e["type"] == "MODEL_CALL"]
    user = call["messages"][1]["content"]
    assert f"[ELIDED {novel_id}: text" in user and f"[ELIDED {data_id}: json" in user
    assert "Netherfield Park is let at last" not in user.split(f"[/ELIDED {novel_id}]")[1]
    # The tool round trip: two calls, each answered with the exact slice.
    tools = [e for e in events if e["type"] == "MODEL_TOOL_CALL"]
    assert [(t["pointer_id"], t["slice"], t["error"]) for t in tools] == [
        (novel_id, "lines 1-20", None),
        (data_id, "$.results[0]", None),
    ]
    sent = [m["content"] for m in call["messages"] if m["role"] == "tool"]
    assert sent[0] == lines(novel, 1, 20)
    assert json.loads(sent[1]) == json.loads(data)["results"][0] and sent[1] in data
    assert get_counter().count(sent[0]) == tools[0]["tokens"]
    # The answer quotes the slice the tool brought back, cited by pointer and slice.
    answer = result["output"]["final_answer"]
    assert f"Sources: [{novel_id} lines 1-20]" in answer
    assert "> It is a truth universally acknowledged, that a single man in possession" in answer
    # The rehydrate step: the exact passage where Pemberley is first named.
    assert result["output"]["quote"] == lines(novel, 964, 966)
    assert "Pemberley" in result["output"]["quote"]
    (done,) = [e for e in events if e["type"] == "RUN_COMPLETED"]
    assert done.get("counters", {}).get("context_budget_violations", 0) == 0


def test_offline_with_the_extractive_responder(inputs, tmp_path):
    code, result, events = execute(inputs, tmp_path)
    check_run(code, result, events)
    (call,) = [e for e in events if e["type"] == "MODEL_CALL"]
    assert call["provider"] == "extractive"


def test_offline_with_the_cassette(inputs, tmp_path):
    code, result, events = execute(inputs, tmp_path, PIPELINE, "--model", "small_replay")
    check_run(code, result, events)
    (call,) = [e for e in events if e["type"] == "MODEL_CALL"]
    assert call["provider"] == "replay"
    cassette = ROOT / "pipelines" / "long_inputs.cassette.jsonl"
    recorded = [json.loads(line) for line in cassette.read_text().splitlines()]
    # The slices sent back are the ones recorded (the summaries around them may change with
    # the summarisers; re-record with --record, docs/budget.md).
    tool_messages = [m for m in call["messages"] if m["role"] == "tool"]
    assert [m for m in recorded[-1]["request"]["messages"] if m["role"] == "tool"] == tool_messages
    assert [c["name"] for c in recorded[0]["tool_calls"]] == ["rehydrate", "rehydrate"]
