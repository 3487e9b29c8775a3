"""A `--store` naming another program's SQLite database is refused, and left as it was.

Reading commands (runs, trace, context, verify) and exec used to add the run store's
eighteen tables to any SQLite file they were pointed at (a node index, an application's
database) before answering RUN_NOT_FOUND.
"""

from __future__ import annotations

import sqlite3

import pytest

from runtime.cli import cli


@pytest.mark.parametrize(
    "args",
    [["runs"], ["trace", "r1"], ["context", "r1"], ["verify", "r1"], ["resume", "r1"]],
)
def test_another_programs_database_is_store_error_and_untouched(runner, tmp_path, args):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    done = runner.invoke(cli, [*args, "--store", str(db)])
    assert done.exit_code != 0 and "Traceback" not in done.output
    assert "STORE_ERROR" in done.stderr and "not a run store" in done.stderr
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    assert tables == ["users"]


def test_an_empty_file_or_a_run_store_still_opens(tmp_path):
    from runtime.engine.store import SqliteRunStore

    empty = tmp_path / "new.db"
    SqliteRunStore(str(empty)).close()  # a new store: no tables yet, the store's are made
    SqliteRunStore(str(empty), create=False).close()  # and it opens again as a run store
