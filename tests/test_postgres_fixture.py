"""The shared PostgreSQL fixture (tests/postgres.py): a real server, a fresh database per test."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests import postgres


def test_pg_url_is_a_fresh_database_on_a_real_server(pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()[0]
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()[0]
        conn.execute("CREATE TABLE marker (x int)")
    assert int(version) >= 150000
    assert tables == 0
    assert "127.0.0.1" in pg_url


def test_each_test_gets_its_own_database(pg_url: str, pg_server: Any) -> None:
    import psycopg

    # The table the test above created is not here (another database, or dropped).
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('marker')").fetchone()[0] is None
    other = pg_server.create_database()
    assert other != pg_url
    pg_server.drop_database(other.rsplit("/", 1)[1])


def test_a_private_server_stops_and_comes_back(pg_private_server: Any) -> None:
    import psycopg

    url = pg_private_server.create_database("kept")
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (7)")
    pg_private_server.stop()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    pg_private_server.restart()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT x FROM t").fetchone()[0] == 7


def test_server_runs_unprivileged(pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        # pg_backend_pid's process belongs to the postgres user, never root (read while
        # the session, and so the process, is alive).
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        owner = os.stat(f"/proc/{pid}").st_uid
    assert owner != 0 or os.geteuid() != 0


def test_missing_binaries_are_a_skip_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "DEFAULT_BIN", "/nonexistent")
    monkeypatch.setenv("STEP_RUNTIME_PG_BIN", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    why = postgres.unavailable()
    assert why is not None and "PostgreSQL binaries not found" in why
    assert "system-deps" in why
