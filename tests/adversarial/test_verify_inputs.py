"""`runtime verify` and `runtime context` on odd run ids, a huge --step and ledger rows whose
sequence number was edited to text: a coded error or a mismatch report, never a traceback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runtime.cli import cli

PIPELINE = (
    "settings: {entry_step_id: a}\n"
    "steps:\n"
    "  - {id: a, action: set_variables, rules: [{set: x, value: 1}], next: f}\n"
    "  - {id: f, action: finalize, source: x}\n"
)


@pytest.fixture
def store(runner, tmp_path: Path) -> str:
    (tmp_path / "p.yaml").write_text(PIPELINE)
    path = str(tmp_path / "r.db")
    done = runner.invoke(cli, ["exec", str(tmp_path / "p.yaml"), "--store", path, "--run-id", "r"])
    assert done.exit_code == 0, done.output
    return path


def _coded(result) -> None:
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "table,column,where",
    [
        ("run_ledger", "seq", "seq = 1"),
        ("events", "ledger_seq", "seq = 3"),
    ],
)
@pytest.mark.parametrize("value", ["x", "7", b"\x01"])
def test_a_ledger_seq_edited_to_text_is_a_mismatch_not_a_traceback(
    runner, store, table, column, where, value
):
    with sqlite3.connect(store) as db:
        changed = db.execute(
            f"UPDATE {table} SET {column} = ? WHERE run_id = 'r' AND {where}", (value,)
        ).rowcount
    db.close()
    assert changed == 1
    for extra in ([], ["--json"]):
        result = runner.invoke(cli, ["verify", "r", "--store", store, *extra])
        _coded(result)
        assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["first_mismatch"] is not None


ODD_IDS = ["", " ", "%", "_", "'", '"', "r'--", "r;DROP TABLE runs", "../r", "r\n", "é" * 3000]


@pytest.mark.parametrize("run_id", ODD_IDS)
def test_odd_run_ids_are_run_not_found(runner, store, run_id):
    for command in (["verify"], ["context"], ["context", "--json"], ["context", "--step", "a"]):
        result = runner.invoke(cli, [command[0], run_id, *command[1:], "--store", store])
        _coded(result)
        assert result.exit_code == 1 and "RUN_NOT_FOUND" in result.stderr, result.output
    assert runner.invoke(cli, ["verify", "r", "--store", store]).exit_code == 0


def test_a_huge_step_name_is_a_usage_error_that_does_not_echo_it_whole(runner, store):
    step = "s" * 200_000
    result = runner.invoke(cli, ["context", "r", "--step", step, "--store", store])
    _coded(result)
    assert result.exit_code == 2 and "made no model call" in result.stderr
    assert len(result.stderr) < 1_000
