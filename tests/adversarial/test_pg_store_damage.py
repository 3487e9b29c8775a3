"""A damaged Postgres run store never answers wrongly: a coded error, never a wrong slice.

The SQLite store's sweep (test_store_damage.py) flips bytes of its file's pages; a Postgres
database has no file a user edits, but its rows can be edited with SQL (an operator's
mistake, a restore gone wrong, an attacker with write access). So here every cell of the
tables that hold originals, pointers, threads, variables and the trace is damaged, one at a
time and in several ways (one character or byte changed, a number moved by one, the value
of another row, NULL), and everything is read back through the store, rehydrate and the
`runtime trace` renderers: each read is the right answer or a coded error.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_store_damage import read_everything, small_store

from runtime.engine import storecopy

pytestmark = pytest.mark.postgres

# Where a damaged cell could become a wrong slice (every column) and the run's other rows.
TABLES = {
    "originals": ("sha256", "chars", "chunks", "crc"),
    "original_chunks": ("sha256", "n", "text", "crc"),
    "original_index": ("sha256", "offsets", "crc"),
    "run_pointers": ("pointer_id", "sha256", "kind", "crc"),
    "run_threads": ("thread_id", "n", "message"),
    "run_vars": ("name", "value"),
    "events": ("seq", "type", "data"),
}


def _damages(value: Any, other: Any) -> list[Any]:
    """Ways to damage one cell: changed a little, another row's value, NULL."""
    out: list[Any] = [None]
    if isinstance(value, bool) or value is None:
        return out
    if isinstance(value, int):
        out += [value + 1, value - 1]
    elif isinstance(value, str) and value:
        mid = len(value) // 2
        out.append(value[:mid] + ("x" if value[mid] != "x" else "y") + value[mid + 1 :])
    elif isinstance(value, (bytes, memoryview)) and len(value):
        data = bytearray(value)
        data[len(data) // 2] ^= 0x01
        out.append(bytes(data))
    if other is not None and other != value:
        out.append(other)
    return out


def _psql(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _back_up(url: str) -> None:
    """A copy of each swept table, its rows numbered (put back by `_restore`)."""
    with _psql(url) as conn:
        for table in TABLES:
            conn.execute(
                f"CREATE TABLE bk_{table} AS SELECT row_number() OVER () AS rn, * FROM {table}"
            )


def _restore(conn: Any) -> None:
    """Every swept table as backed up, its rows in the same order, so the same ctids each
    time (a read may also write: rehydrate indexes an original it finds unindexed)."""
    for table in TABLES:
        names = ", ".join(
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                " ORDER BY ordinal_position",
                (table,),
            )
        )
        conn.execute(f"TRUNCATE {table}")
        conn.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM bk_{table} ORDER BY rn")


def _cells(url: str) -> list[tuple[str, str, str, Any, Any]]:
    """(table, column, ctid, value, another row's value) of every cell swept, as restored."""
    out = []
    with _psql(url) as conn:
        _restore(conn)
        for table, columns in TABLES.items():
            rows = conn.execute(f"SELECT ctid::text, {', '.join(columns)} FROM {table}").fetchall()
            for i, row in enumerate(rows):
                other = rows[(i + 1) % len(rows)] if len(rows) > 1 else None
                for j, column in enumerate(columns, 1):
                    out.append((table, column, row[0], row[j], other[j] if other else None))
    return out


def _store_on_postgres(tmp_path: Any, monkeypatch: Any, url: str) -> dict[Any, str]:
    """The SQLite sweep's small store, copied into Postgres; the slices it must give."""
    db, expected = small_store(tmp_path, monkeypatch)
    assert storecopy.copy_run_store(db, url).ok
    _back_up(url)
    return expected


def sweep(url: str, expected: dict[Any, str], cells: list[Any]) -> dict[str, int]:
    """Damage each cell in each way, one at a time, read everything; the tables restored
    before each damage."""
    outcomes: dict[str, int] = {}
    with _psql(url) as conn:
        for table, column, ctid, value, other in cells:
            for damaged in _damages(value, other):
                _restore(conn)
                try:
                    conn.execute(
                        f"UPDATE {table} SET {column} = %s WHERE ctid = %s::tid", (damaged, ctid)
                    )
                except Exception as exc:  # a NOT NULL or key constraint refused the damage
                    assert type(exc).__module__.startswith("psycopg"), exc
                    continue
                code = read_everything(url, expected)
                outcomes[code] = outcomes.get(code, 0) + 1
        _restore(conn)
    return outcomes


def test_the_undamaged_copy_reads_back_whole(tmp_path, monkeypatch, pg_url):
    expected = _store_on_postgres(tmp_path, monkeypatch, pg_url)
    assert read_everything(pg_url, expected) == "ok"


@pytest.mark.parametrize("table", ["original_chunks", "original_index", "run_pointers"])
def test_a_damaged_cell_of_what_slices_read_is_never_a_wrong_slice(
    tmp_path, monkeypatch, pg_url, table
):
    """The fast chunk: the tables a wrong slice would come from, every cell, every way."""
    expected = _store_on_postgres(tmp_path, monkeypatch, pg_url)
    cells = [c for c in _cells(pg_url) if c[0] == table][::5]  # the slow test takes all
    assert cells
    outcomes = sweep(pg_url, expected, cells)
    assert "STORE_ERROR" in ",".join(outcomes)  # the damage was seen, not only survived


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(3))
def test_every_cell_of_every_table_that_holds_a_runs_text(tmp_path, monkeypatch, pg_url, chunk):
    """The slow chunks: every cell of every swept table, every way, over 3 chunks."""
    expected = _store_on_postgres(tmp_path, monkeypatch, pg_url)
    outcomes = sweep(pg_url, expected, _cells(pg_url)[chunk::3])
    assert "STORE_ERROR" in ",".join(outcomes)
