"""pipelines/compare_snapshots.yaml end to end, offline (issue 31): the same question on
two snapshots of the sample in parallel, one answer citing evidence from both."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_compare_snapshots_answers_from_both_snapshots(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sample = ROOT / "pipelines" / "sample"
    assert run("index", str(sample / "eshop"), "--repository", "eshop")[0] == 0
    code, _ = run(
        "index", str(sample / "eshop_release"), "--repository", "eshop", "--snapshot", "release"
    )
    assert code == 0
    question = "What does usp_CapturePayment write?"
    code, out = run(
        "exec",
        str(ROOT / "pipelines" / "compare_snapshots.yaml"),
        "--input",
        f"question={question}",
        "--json",
    )
    assert code == 0, out
    result = json.loads(out)
    answer = result["output"]["final_answer"]
    assert "[eshop::main::procedure::dbo.usp_CapturePayment]" in answer
    assert "[eshop::release::procedure::dbo.usp_CapturePayment]" in answer
    assert "PaymentAudit" in answer  # the change the release snapshot brings
    snapshots = {block["id"].split("::")[1] for block in result["state"]["evidence"]}
    assert snapshots == {"main", "release"}
    code, out = run("trace", result["run_id"], "--format", "jsonl")
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    branches = [e for e in events if e["type"] == "BRANCH"]
    assert [b["status"] for b in branches] == ["completed", "completed"]
    # Each branch is a run of its own, timed in the parent's trace (that they really run at
    # once is held by tests/runtime/test_branches.py's barrier test: timing here depends on
    # the machine's load).
    assert [b["run_id"] for b in branches] == [
        f"{result['run_id']}.per_snapshot.{i}" for i in (0, 1)
    ]
    assert all(0 <= b["started_ms"] <= b["ended_ms"] for b in branches)


def test_the_graph_in_the_docs_is_what_runtime_graph_draws():
    page = (ROOT / "docs" / "parallel.md").read_text()
    drawn = page.split("```mermaid\n")[1].split("```")[0]
    code, out = run("graph", str(ROOT / "pipelines" / "compare_snapshots.yaml"))
    assert code == 0 and out.strip() == drawn.strip()


def test_trace_shows_the_branches_side_by_side_and_each_branch_on_its_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sample = ROOT / "pipelines" / "sample"
    assert run("index", str(sample / "eshop"), "--repository", "eshop")[0] == 0
    code, _ = run(
        "index", str(sample / "eshop_release"), "--repository", "eshop", "--snapshot", "release"
    )
    assert code == 0
    code, out = run(
        "exec",
        str(ROOT / "pipelines" / "compare_snapshots.yaml"),
        "--input",
        "question=What does usp_CapturePayment write?",
        "--json",
    )
    run_id = json.loads(out)["run_id"]
    code, out = run("trace", run_id, "--branches")
    assert code == 0, out
    header, first, second = out.splitlines()
    assert header.startswith("step per_snapshot: 2 branch(es), ")
    for line, key in ((first, "0"), (second, "1")):
        assert line.startswith(f"  {key} |") and line.endswith(
            f"completed  {run_id}.per_snapshot.{key}"
        )
        bar = line.split("|")[1]
        assert len(bar) == 40 and "#" in bar
    # jsonl: the BRANCH events themselves
    code, out = run("trace", run_id, "--branches", "--format", "jsonl")
    assert [json.loads(x)["branch"] for x in out.splitlines()] == ["0", "1"]
    # one branch's own run: its search was scoped to its snapshot
    code, out = run("trace", run_id, "--branch", "per_snapshot.1", "--format", "jsonl")
    events = [json.loads(x) for x in out.splitlines()]
    assert {e["run_id"] for e in events} == {f"{run_id}.per_snapshot.1"}
    [search] = [e for e in events if e["type"] == "SEARCH"]
    assert search["scope"]["snapshot"] == "release"
    code, out = run("trace", run_id, "--branch", "2")
    assert (
        code != 0
        and "no branch '2' in this run; its branches: per_snapshot.0, per_snapshot.1" in out
    )
