"""The older engine's snapshot comparison (parallel_roads_action, fork_action, merge_action)
runs unchanged on branches (issue 31): its shipped shannon.yaml validates and answers from
both snapshots, the segment runs once per snapshot at the same time on copies of the state,
the merge labels each snapshot's nodes in the fork's order, and malformed trios are coded
errors with positions."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

import runtime
from runtime.cli import cli
from runtime.contract.action import Action
from runtime.contract.registry import Registry, default_registry
from runtime.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
SHANNON = ROOT / "tests" / "data" / "legacy" / "pipelines" / "shannon.yaml"
sys.path.insert(0, str(ROOT / "tests" / "runtime"))


@pytest.fixture(scope="module")
def two_snapshots(tmp_path_factory, hashing_embedder) -> Path:
    """The sample indexed twice, with vectors (its search step is semantic): main, and
    release (where usp_CapturePayment also writes PaymentAudit)."""
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import SqliteNodeStore

    index = tmp_path_factory.mktemp("trio") / "index.db"
    store = SqliteNodeStore(str(index), create=True)
    sample = ROOT / "pipelines" / "sample"
    for path, snapshot in ((sample / "eshop", "main"), (sample / "eshop_release", "release")):
        index_paths(
            store, [str(path)], repository="eshop", snapshot=snapshot, embedder=hashing_embedder
        )
    return index


def test_shannon_validates_with_no_diagnostic_about_the_trio():
    result = CliRunner().invoke(cli, ["validate", str(SHANNON), "--format", "json"])
    report = json.loads(result.output)
    codes = {d["code"] for d in report["diagnostics"]}
    assert result.exit_code == 0, result.output
    assert not codes & {"ACTION_NOT_YET_SUPPORTED", "SNAPSHOT_TRIO_INVALID", "UNKNOWN_ACTION"}


def shannon(tmp_path: Path, index: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    store = tmp_path / "runs.db"
    args = ["exec", str(SHANNON), "--index", str(index), "--store", str(store), "--json"]
    inputs = {
        "user_query": "What does usp_CapturePayment write?",
        "snapshot_id": "main",
        "snapshot_id_b": "release",
        # the older engine derived it; nothing in the file writes it (see the legacy tests)
        "composed_context_for_prompt": "",
    }
    for name, value in inputs.items():
        if not any(e.startswith(f"{name}=") for e in extra):
            args += ["--input", f"{name}={value}"]
    for e in extra:
        args += ["--input", e]
    result = CliRunner().invoke(cli, args)
    out = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, out, str(store)


def test_shannon_runs_unchanged_and_compares_both_snapshots(
    tmp_path, two_snapshots, hashing_by_default
):
    code, out, store = shannon(tmp_path, two_snapshots)
    assert code == 0, (out.get("error"), out.get("steps"))
    assert (out["status"], out["error"]) == ("completed", None)
    # The fork goes straight to the merge: the segment ran in the branches, not here.
    steps = out["steps"]
    i = steps.index("fork_snapshots")
    assert steps[i : i + 2] == ["fork_snapshots", "merge_snapshots"]
    assert "search_nodes" not in steps and "fetch_node_texts" not in steps
    blocks = out["state"]["context_blocks"]
    # The loop's retry step empties context_blocks before searching again: what is left is
    # the last visit's merge.
    labels = [b for b in blocks if not b.startswith("--- NODE ---")]
    assert labels == ["Branch snapshot_a", "Branch snapshot_b"]  # the fork's order
    cut = blocks.index("Branch snapshot_b")
    main_ids = [b.split("\n")[1] for b in blocks[1:cut]]
    release_ids = [b.split("\n")[1] for b in blocks[cut + 1 :]]
    assert main_ids and release_ids
    assert all("::main::" in i for i in main_ids)
    assert all("::release::" in i for i in release_ids)
    assert any("PaymentAudit" in b for b in blocks[cut + 1 :])  # only the release writes it
    assert not any("PaymentAudit" in b for b in blocks[1:cut])
    # Each snapshot was a branch run of its own, traced in the parent.
    events = [json.loads(line) for line in _trace(out["run_id"], store).splitlines()]
    branches = [e for e in events if e["type"] == "BRANCH"]
    # Offline the sufficiency router asks for another search until its loop guard denies:
    # each visit of the fork runs both snapshots again, as new branch runs.
    visits = steps.count("fork_snapshots")
    assert visits > 1
    assert [(b["branch"], b["status"]) for b in branches] == [
        ("snapshot_a", "completed"),
        ("snapshot_b", "completed"),
    ] * visits
    assert branches[0]["run_id"] == f"{out['run_id']}.fork_snapshots.snapshot_a"
    assert branches[2]["run_id"] == f"{out['run_id']}.fork_snapshots@2.snapshot_a"
    branch_run = runtime.SqliteRunStore(store, create=False).load(branches[1]["run_id"])
    assert branch_run["status"] == "completed"
    # A branch's own writes stay in it: the parent never saw node_texts of either snapshot.
    assert not out["state"].get("node_texts")


def _trace(run_id: str, store: str) -> str:
    result = CliRunner().invoke(cli, ["trace", run_id, "--store", store, "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_missing_second_snapshot_is_a_coded_error_naming_the_fork(
    tmp_path, two_snapshots, hashing_by_default
):
    code, out, _ = shannon(tmp_path, two_snapshots, "snapshot_id_b=")
    assert code != 0
    assert out["error"]["code"] == "VARIABLE_MISSING"
    assert out["error"]["step_id"] == "fork_snapshots"
    assert "snapshot_b" in out["error"]["message"]


# --- the segment runs at once, on copies, in a small pipeline of test actions -------------

BARRIER = threading.Barrier(2)


class Probe(Action):
    """Waits for the other snapshot (a sequential fork never gets past it), changes the
    list it was given in place, and leaves node_texts naming its snapshot."""

    name = "probe"
    summary = "Test."
    runnable = True
    fields: ClassVar[dict[str, dict[str, Any]]] = {}

    def run(self, ctx: Any) -> None:
        BARRIER.wait(timeout=10)
        seen = ctx.get("shared")
        seen.append(ctx.inputs["snapshot"])  # a copy: the parent's list must not change
        ctx.set("node_texts", [{"id": f"n-{ctx.inputs['snapshot']}", "text": "t"}])


def registry() -> Registry:
    base = default_registry()
    names = ("parallel_roads_action", "fork_action", "merge_action", "set_variables", "finalize")
    return Registry.from_classes(Probe, *(base.get(n) for n in names))


def trio(**fork: Any) -> dict[str, Any]:
    return {
        "name": "trio",
        "settings": {"entry_step_id": "prep"},
        "steps": [
            {
                "id": "prep",
                "action": "set_variables",
                "rules": [{"set": "shared", "value": ["parent"]}],
                "next": "roads",
            },
            {"id": "roads", "action": "parallel_roads_action", "next": "fork"},
            {
                "id": "fork",
                "action": "fork_action",
                "search_action": "probe",
                "snapshots": {"b": "second", "a": "first"},
                "next": "probe",
                **fork,
            },
            {"id": "probe", "action": "probe", "next": "merge"},
            {
                "id": "merge",
                "action": "merge_action",
                "snapshots": {"a": "Snapshot {}", "b": "Snapshot {}"},
                "next": "done",
            },
            {"id": "done", "action": "finalize", "source": "context_blocks", "end": True},
        ],
    }


def load(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "p.json.yaml"
    path.write_text(json.dumps(data))
    return runtime.load(str(path), registry=registry())


def test_the_snapshots_run_at_once_on_copies_and_merge_in_the_forks_order(tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    result = Engine(load(tmp_path, trio()), registry=registry(), store=store).run({})
    assert result.status == "completed", result.error
    assert result.state["shared"] == ["parent"]
    assert result.state["context_blocks"] == [
        "Snapshot b",
        "--- NODE ---\nid: n-second\npath: \ntext:\nt\n",
        "Snapshot a",
        "--- NODE ---\nid: n-first\npath: \ntext:\nt\n",
    ]
    assert result.steps == ["prep", "roads", "fork", "merge", "done"]


def test_one_at_a_time_the_barrier_is_never_passed(tmp_path):
    # max_concurrency 1 is the older engine's sequential loop: the probe's barrier (two
    # parties) then times out, which is what proves the default really runs them at once.
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    BARRIER.reset()
    engine = Engine(load(tmp_path, trio(max_concurrency=1)), registry=registry(), store=store)
    result = engine.run({})
    BARRIER.reset()
    assert result.status == "failed"
    assert result.error.step_id == "fork"


@pytest.mark.parametrize(
    ("change", "message", "field"),
    [
        ({"search_action": "nowhere"}, "search_action 'nowhere' is not a step", "search_action"),
        (
            {"search_action": "done"},
            "no merge_action step is reached from 'done'",
            "search_action",
        ),
        ({"search_action": "roads"}, "lead back to the fork itself", "search_action"),
    ],
)
def test_a_malformed_trio_is_refused_by_validate_with_its_position(
    tmp_path, change, message, field
):
    data = trio(**change)
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    found = [
        d
        for d in runtime.validate(str(path), registry=registry()).diagnostics
        if d.code == "SNAPSHOT_TRIO_INVALID"
    ]
    assert len(found) == 1 and message in found[0].message
    line = path.read_text().splitlines()[found[0].line - 1]
    assert line.strip().startswith(f"{field}:")


def test_a_merge_no_fork_leads_to_is_refused(tmp_path):
    data = trio()
    data["steps"][1]["next"] = "probe"  # roads -> probe -> merge, no fork
    del data["steps"][2]
    path = tmp_path / "p.yaml"
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False))
    found = [
        d.message
        for d in runtime.validate(str(path), registry=registry()).diagnostics
        if d.code == "SNAPSHOT_TRIO_INVALID"
    ]
    assert any("merge_action step 'merge' is reached from no fork_action" in m for m in found)
