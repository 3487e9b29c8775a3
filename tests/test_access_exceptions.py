"""Governed exceptions for access rules (issue 28; docs/access.md#governed-exceptions).

An `access_labels` exception lifts the clearance rule for named labels in named steps:
the covered steps read as a subject cleared for those labels too, under every engine;
other steps, other tenants and labels outside the pins stay denied. Each read that uses
it is an EXCEPTION_USED event (a ledger entry); validate warns, an expired one is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.cli import cli
from runtime.engine.store import SqliteRunStore
from tests.test_access_e2e import LABELS, PIPELINES, QUESTION, write_tree

ACCESS = PIPELINES / "access"
SUBJECT = {"id": "ana", "tenant": "a", "clearance": ["public"]}
A_PUBLIC = "shop::main::procedure::dbo.usp_ShipOrderAPublic"
A_INTERNAL = "shop::main::procedure::dbo.usp_ShipOrderAInternal"
EXCEPTION = {
    "id": "legacy-internal-search",
    "rule": "access_labels",
    "labels": ["internal"],
    "steps": ["search"],
    "owner": "data-governance@example.com",
    "expires": "2999-12-31",
    "rollback": "the legacy report moving to the labelled API",
    "reason": "the legacy report lists internal procedures by name",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    base = tmp_path_factory.mktemp("tenants")
    write_tree(base / "tree")
    (base / "labels.json").write_text(json.dumps(LABELS))
    path = base / "index.db"
    args = ["index", str(base / "tree"), "--index", str(path), "--repository", "shop"]
    result = CliRunner().invoke(cli, [*args, "--labels", str(base / "labels.json")])
    assert result.exit_code == 0, result.output
    return str(path)


def pipeline(tmp_path: Path, exceptions: list[dict[str, Any]], **settings: Any) -> Path:
    """search (covered by the exceptions), then fetch (not covered), then done."""
    doc = {
        "name": "legacy_read",
        "settings": {"entry_step_id": "search", "top_k": 8, "exceptions": exceptions, **settings},
        "inputs": {"question": {"type": "string"}},
        "steps": [
            {
                "id": "search",
                "action": "search_nodes",
                "search_type": "bm25",
                "fallback_query_from": "question",
                "next": "fetch",
            },
            {"id": "fetch", "action": "fetch_node_texts", "budget_tokens": 3000, "next": "done"},
            {"id": "done", "action": "finalize", "source": "node_texts"},
        ],
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(runner, index, path: Path, subject=SUBJECT, code: int = 0):
    store = path.parent / "runs.db"
    args = ["exec", str(path), "--index", index, "--store", str(store), "--json"]
    args += ["--input", f"question={QUESTION}", "--subject", json.dumps(subject)]
    result = runner.invoke(cli, args)
    assert result.exit_code == code, result.output
    if code:
        return result, []
    out = json.loads(result.stdout)
    return out, SqliteRunStore(str(store), create=False).events(out["run_id"])


def hits(out) -> set[str]:
    return {h["id"] for h in out["state"]["retrieval_hits"]}


def fetched(out) -> set[str]:
    return {t["id"] for t in out["state"]["node_texts"]}


def test_the_covered_step_reads_the_lifted_labels_and_no_other_step_does(runner, index, tmp_path):
    out, events = run(runner, index, pipeline(tmp_path, [EXCEPTION]))
    assert hits(out) == {A_PUBLIC, A_INTERNAL}  # tenant b never, internal or public
    assert fetched(out) == {A_PUBLIC}  # fetch is not covered: the internal node is denied
    used = [e for e in events if e["type"] == "EXCEPTION_USED"]
    assert [(e["step"], e["rule"], e["labels"]) for e in used] == [
        ("search", "access_labels", ["internal"])
    ]
    assert used[0]["owner"] == EXCEPTION["owner"] and used[0]["expires"] == "2999-12-31"
    access = {e["step_id"]: e for e in events if e["type"] == "ACCESS"}
    assert "internal" in access["search"]["decisions"][-1]["reason"]
    assert access["fetch"]["denied"] >= 1
    # The recorded subject is the run's, unchanged.
    started = next(e for e in events if e["type"] == "RUN_STARTED")
    assert started["subject"]["clearance"] == ["public"]


def test_without_the_exception_the_step_reads_as_its_subject(runner, index, tmp_path):
    out, events = run(runner, index, pipeline(tmp_path, []))
    assert hits(out) == {A_PUBLIC}
    assert not [e for e in events if e["type"] == "EXCEPTION_USED"]


def test_another_steps_exception_lifts_nothing_here(runner, index, tmp_path):
    out, events = run(runner, index, pipeline(tmp_path, [{**EXCEPTION, "steps": ["done"]}]))
    assert hits(out) == {A_PUBLIC} and fetched(out) == {A_PUBLIC}
    assert not [e for e in events if e["type"] == "EXCEPTION_USED"]


def test_the_lift_holds_under_cedar_too(runner, index, tmp_path):
    access = {
        "engine": "cedar",
        "policies": str(ACCESS / "policy.cedar"),
        "schema": str(ACCESS / "schema.cedarschema"),
    }
    out, events = run(runner, index, pipeline(tmp_path, [EXCEPTION], access=access))
    assert hits(out) == {A_PUBLIC, A_INTERNAL} and fetched(out) == {A_PUBLIC}
    assert [e["step"] for e in events if e["type"] == "EXCEPTION_USED"] == ["search"]


def test_the_use_is_a_ledger_entry_that_verify_covers(runner, index, tmp_path):
    import sqlite3

    out, _ = run(runner, index, pipeline(tmp_path, [EXCEPTION]))
    store = str(tmp_path / "runs.db")
    verified = runner.invoke(cli, ["verify", out["run_id"], "--store", store, "--json"])
    assert verified.exit_code == 0 and json.loads(verified.stdout)["ok"] is True
    db = sqlite3.connect(store)
    rows = db.execute(
        "SELECT content FROM run_ledger WHERE run_id = ? AND kind = 'decision'", (out["run_id"],)
    ).fetchall()
    db.close()
    assert any('"EXCEPTION_USED"' in r[0] for r in rows)


def test_validate_warns_with_owner_and_expiry_and_exec_refuses_an_expired_one(
    runner, index, tmp_path
):
    path = pipeline(tmp_path, [EXCEPTION])
    checked = runner.invoke(cli, ["validate", "--format", "json", str(path)])
    assert checked.exit_code == 0, checked.output
    [warning] = [
        d for d in json.loads(checked.stdout)["diagnostics"] if d["code"].startswith("EXC")
    ]
    assert warning["code"] == "EXCEPTION_DECLARED" and warning["severity"] == "warning"
    assert (
        "data-governance@example.com" in warning["message"] and "2999-12-31" in warning["message"]
    )
    expired = pipeline(tmp_path, [{**EXCEPTION, "expires": "2020-01-31"}])
    result, _ = run(runner, index, expired, code=2)
    assert "EXCEPTION_EXPIRED" in result.output


def test_the_docs_example_validates_and_runs_as_described(runner, index, tmp_path):
    from tests.test_access_docs import blocks

    [_, example] = blocks("Governed exceptions", "yaml")
    path = tmp_path / "legacy.yaml"
    path.write_text(example)
    [declared] = yaml.safe_load(example)["settings"]["exceptions"]
    assert {**declared, "expires": str(declared["expires"])} == EXCEPTION
    checked = runner.invoke(cli, ["validate", str(path)])
    assert checked.exit_code == 0 and "EXCEPTION_DECLARED" in checked.output
    out, events = run(runner, index, path)
    assert hits(out) == {A_PUBLIC, A_INTERNAL} and fetched(out) == {A_PUBLIC}
    assert [e["step"] for e in events if e["type"] == "EXCEPTION_USED"] == ["search"]


def test_only_a_read_traces_the_use_and_the_lift_is_the_steps_own():
    from types import SimpleNamespace

    from actions._scope import run_subject

    traced: list[tuple[str, dict[str, Any]]] = []
    ctx = SimpleNamespace(
        step_id="search",
        settings={"exceptions": [EXCEPTION]},
        inputs={"subject": SUBJECT},
        trace=lambda event, **data: traced.append((event, data)),
    )
    assert run_subject(ctx).clearance == ("internal", "public")
    assert traced == []  # asking who the subject is is no read
    assert run_subject(ctx, reading=True).clearance == ("internal", "public")
    assert [(e, d["step"], d["labels"]) for e, d in traced] == [
        ("EXCEPTION_USED", "search", ["internal"])
    ]
    ctx.step_id = "fetch"
    assert run_subject(ctx, reading=True).clearance == ("public",) and len(traced) == 1
