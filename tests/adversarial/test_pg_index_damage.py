"""A Postgres index edited apart hides, never shows (the SQLite index's promise, issue 34).

The eshop sample's procedures are labelled `confidential`. Each cell of a confidential
node's row, of its label set's row and of its full-text term rows is damaged with SQL, one
at a time (a character changed, NULL, the value a public node has), and a caller without
the label searches for it by name, by words and by id, reads it, counts it and follows its
edges: the node and its text never appear, and nothing fails with a traceback.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.engine import indexcopy
from runtime.errors import StepRuntimeError
from runtime.retrieval.indexes import open_index
from runtime.retrieval.node import Scope

pytestmark = pytest.mark.postgres

PUBLIC = Scope("eshop", "main")
PROC = "eshop::main::procedure::dbo.usp_CapturePayment"
NEIGHBOUR = "eshop::main::table::dbo.Payments"  # usp_CapturePayment writes to it
QUERIES = ("usp_CapturePayment", "capture payment", "CapturePayment procedure", "payment")


def _psql(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _shown(url: str, text: str) -> list[str]:
    """Where a caller without the label saw the confidential node ([] when nowhere)."""
    seen = []
    store = open_index(url)
    try:
        for query in QUERIES:
            try:
                hits = store.search(query, scope=PUBLIC, top_k=50, per_file=0)
            except StepRuntimeError:
                continue
            if PROC in {h["id"] for h in hits}:
                seen.append(f"search {query!r}")
        try:
            got = store.get_nodes([PROC], scope=PUBLIC)
            if got or store.count_nodes([PROC], scope=PUBLIC):
                seen.append("read")
        except StepRuntimeError:
            pass
        try:  # the edges of a visible neighbour that lead to it
            edges = store.edges([NEIGHBOUR], scope=PUBLIC, direction="both")
            if any(PROC in e for e in edges):
                seen.append("edges")
        except StepRuntimeError:
            pass
    finally:
        store.close()
    return seen


def _cells(conn: Any) -> list[tuple[str, str, str, Any, Any]]:
    """(table, column, row key SQL, value, a public row's value) to damage."""
    public = (
        conn.execute(
            "SELECT * FROM nodes WHERE labels = '[]' AND kind = 'procedure' LIMIT 1"
        ).fetchone()
        or conn.execute("SELECT * FROM nodes WHERE labels = '[]' LIMIT 1").fetchone()
    )
    cur = conn.execute("SELECT * FROM nodes WHERE id = %s", (PROC,))
    names = [d.name for d in cur.description]
    row = cur.fetchone()
    out = [
        ("nodes", name, f"rowid = {row[0]}", value, public[i])
        for i, (name, value) in enumerate(zip(names, row, strict=True))
        if name != "rowid"
    ]
    (token,) = conn.execute("SELECT label_set FROM nodes WHERE id = %s", (PROC,)).fetchone()
    out += [
        ("label_sets", "labels", f"token = '{token}'", labels, "[]")
        for (labels,) in conn.execute("SELECT labels FROM label_sets WHERE token = %s", (token,))
    ]
    return out


def _damages(value: Any, public: Any) -> list[Any]:
    out: list[Any] = [None]
    if isinstance(value, str) and value:
        mid = len(value) // 2
        out.append(value[:mid] + ("x" if value[mid] != "x" else "y") + value[mid + 1 :])
    elif isinstance(value, int) and not isinstance(value, bool):
        out.append(value + 1)
    if public is not None and public != value:
        out.append(public)
    return out


@pytest.fixture
def pg_index(sample_index: Any, pg_url: str) -> str:
    assert indexcopy.copy_index(sample_index.path, pg_url).ok
    return pg_url


def test_the_undamaged_index_hides_the_node_from_the_public_and_shows_it_cleared(pg_index):
    assert _shown(pg_index, "") == []
    store = open_index(pg_index)
    try:
        cleared = Scope("eshop", "main", ("confidential",))
        assert PROC in {h["id"] for h in store.search(QUERIES[0], scope=cleared, top_k=50)}
    finally:
        store.close()


def test_every_damaged_cell_of_a_confidential_node_keeps_it_hidden(pg_index):
    with _psql(pg_index) as conn:
        cells = _cells(conn)
        assert {c[1] for c in cells} >= {"labels", "label_set", "repository", "id", "fts_meta"}
        tried = 0
        for table, column, where, value, public in cells:
            for damaged in _damages(value, public):
                try:
                    conn.execute(f"UPDATE {table} SET {column} = %s WHERE {where}", (damaged,))
                except Exception as exc:  # a NOT NULL or key constraint refused the damage
                    assert type(exc).__module__.startswith("psycopg"), exc
                    continue
                # the index caches its statistics per version: a write moves it
                conn.execute(
                    "UPDATE index_meta SET value = (value::bigint + 1)::text WHERE key = 'version'"
                )
                tried += 1
                try:
                    assert _shown(pg_index, "") == [], (table, column, damaged)
                finally:
                    conn.execute(f"UPDATE {table} SET {column} = %s WHERE {where}", (value,))
                    conn.execute(
                        "UPDATE index_meta SET value = (value::bigint + 1)::text"
                        " WHERE key = 'version'"
                    )
        assert tried > 20
