"""The node index on both backends (issue 34): the same contract on SQLite and Postgres.

The eshop sample is indexed into SQLite by the real indexer (sample_index) and copied into
a fresh Postgres database by `runtime store copy --what index`'s function, so both sides
hold the same nodes; each test then runs against each backend (`index`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runtime.engine import indexcopy
from runtime.errors import StoreError
from runtime.retrieval.indexes import open_index
from runtime.retrieval.node import Scope

ALL = Scope("eshop", "main", ("confidential",))
PUBLIC = Scope("eshop", "main")
PROC = "eshop::main::procedure::dbo.usp_CapturePayment"
BASKET = "eshop::main::class::Eshop.Core.Services.BasketService"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index(request: pytest.FixtureRequest, sample_index: Any) -> Iterator[Any]:
    """The sample index on each backend."""
    if request.param == "sqlite":
        yield sample_index
        return
    url = str(request.getfixturevalue("pg_url"))
    indexcopy.copy_index(sample_index.path, url)
    store = open_index(url)
    yield store
    store.close()


def _ids(hits: list[dict[str, Any]]) -> list[str]:
    return [h["id"] for h in hits]


@pytest.mark.parametrize("query", ["BasketService", "basket_service", "basket service"])
def test_identifier_spellings_reach_the_same_node_first(index, query):
    hits = index.search(query, scope=PUBLIC, top_k=5, per_file=0)
    assert hits[0]["id"] == BASKET
    assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_a_denied_node_is_never_returned_nor_read(index):
    assert PROC not in _ids(index.search("usp_CapturePayment", scope=PUBLIC, top_k=50))
    assert PROC in _ids(index.search("usp_CapturePayment", scope=ALL, top_k=50))
    assert index.get_nodes([PROC], scope=PUBLIC) == {}
    assert set(index.get_nodes([PROC], scope=ALL)) == {PROC}


def test_repository_and_snapshot_scope(index):
    assert index.search("Order", scope=Scope("other"), top_k=5) == []
    assert index.search("Order", scope=Scope(None, "v9"), top_k=5) == []
    assert index.search("Order", scope=Scope(), top_k=5)


def test_narrowing_filters_inside_the_query(index):
    hits = index.search("order", scope=PUBLIC, top_k=30, filters={"language": "sql"})
    assert hits and all(h["path"].endswith(".sql") for h in hits)
    hits = index.search("order", scope=PUBLIC, top_k=30, filters={"kind": ["table"]})
    assert hits and {h["kind"] for h in hits} == {"table"}
    hits = index.search("order", scope=PUBLIC, top_k=30, filters={"path_prefix": "src/Eshop.Api/"})
    assert hits and all(h["path"].startswith("src/Eshop.Api/") for h in hits)
    # top_k holds after filtering: the filter is in the query, not applied to a cut list
    assert len(index.search("order", scope=PUBLIC, top_k=3, filters={"kind": "table"})) == 3


def test_edges_respect_scope(index):
    repo = "eshop::main::method::Eshop.Infrastructure.Repositories.PaymentRepository.CaptureAsync"
    assert (repo, PROC, "UsesSql") in index.edges([repo], scope=ALL)
    assert (repo, PROC, "UsesSql") not in index.edges([repo], scope=PUBLIC)
    assert (repo, PROC, "UsesSql") in index.edges([PROC], scope=ALL, direction="in")
    assert index.edges([PROC], scope=ALL, direction="in", edge_types=["Nope"]) == []


def test_nodes_keep_their_text_labels_and_token_counts(index, sample_index):
    want = sample_index.get_nodes([BASKET, PROC], scope=ALL)
    got = index.get_nodes([BASKET, PROC], scope=ALL)
    assert got == want
    assert got[BASKET].tokens  # counted when indexed, handed on from either backend


# --- Postgres only ------------------------------------------------------------------------

pg = pytest.mark.postgres


@pg
def test_a_denied_node_weighs_nothing_in_the_scores(tmp_path, pg_url):
    """Scores over the visible nodes are those of an index without the denied ones."""
    from runtime.retrieval.node import Node
    from runtime.retrieval.nodestore import node_row
    from runtime.retrieval.pgindex import PostgresNodeStore

    def node(i: int, labels: list[str]) -> Node:
        return Node(
            f"r::s::function::f{i}",
            "r",
            "s",
            "function",
            f"f{i}",
            f"f{i}",
            f"a{i}.py",
            "python",
            text=f"basket service number {i}" + (" secret basket" if labels else ""),
            labels=labels,
        )

    mixed = PostgresNodeStore(pg_url, create=True)
    mixed.put_rows([node_row(node(i, ["hr"] if i % 2 else [])) for i in range(6)])
    public = mixed.search("basket", scope=Scope("r", "s"), top_k=10)
    assert [h["id"] for h in public] == [f"r::s::function::f{i}" for i in (0, 2, 4)]
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "DELETE FROM node_terms WHERE node IN (SELECT rowid FROM nodes WHERE labels <> '[]')"
        )
        conn.execute("DELETE FROM nodes WHERE labels <> '[]'")
    alone = mixed.search("basket", scope=Scope("r", "s"), top_k=10)
    assert public == alone
    mixed.close()


@pg
def test_copy_sqlite_to_postgres_and_back_is_verified(sample_index, tmp_path, pg_url):
    there = indexcopy.copy_index(sample_index.path, pg_url)
    assert there.ok and {t.table for t in there.tables if t.rows} >= {
        "nodes",
        "edges",
        "node_tokens",
        "files",
        "label_sets",
        "repository_roots",
    }
    back = tmp_path / "back.db"
    again = indexcopy.copy_index(pg_url, str(back))
    assert [(t.table, t.rows, t.sha256) for t in again.tables] == [
        (t.table, t.rows, t.sha256) for t in there.tables
    ]
    copied = open_index(str(back))
    assert _ids(copied.search("BasketService", scope=PUBLIC, top_k=5)) == _ids(
        sample_index.search("BasketService", scope=PUBLIC, top_k=5)
    )


@pg
def test_a_damaged_copy_is_refused_and_keeps_nothing(sample_index, pg_url, monkeypatch):
    def damage(table: str, row: tuple[Any, ...]) -> tuple[Any, ...]:
        if table == "edges" and row[2] == "UsesSql":
            return (*row[:2], "Calls", *row[3:])
        return row

    monkeypatch.setattr(indexcopy, "_damage", damage)
    with pytest.raises(StoreError) as err:
        indexcopy.copy_index(sample_index.path, pg_url)
    assert err.value.code == "STORE_COPY_MISMATCH" and "table edges" in str(err.value)
    assert open_index(pg_url).counts()["nodes"] == 0


@pg
def test_a_copy_into_a_filled_index_is_refused(sample_index, pg_url):
    indexcopy.copy_index(sample_index.path, pg_url)
    with pytest.raises(StoreError) as err:
        indexcopy.copy_index(sample_index.path, pg_url)
    assert err.value.code == "STORE_COPY_TARGET_NOT_EMPTY"


@pg
def test_store_copy_what_index_from_the_cli(sample_index, pg_url):
    from runtime.cli import cli

    result = CliRunner().invoke(
        cli, ["store", "copy", sample_index.path, pg_url, "--what", "index"]
    )
    assert result.exit_code == 0, result.output
    assert "verified" in result.output and "nodes:" in result.output


@pg
def test_exec_answers_from_a_postgres_index_given_by_url(sample_index, pg_url, tmp_path):
    # what docs/retrieval.md tells a user: copy the index in, then --index the URL
    import json

    from runtime.cli import cli

    indexcopy.copy_index(sample_index.path, pg_url)
    root = Path(__file__).resolve().parents[2]
    question = "question=Which stored procedure writes the OrderLines table?"
    store = ["--store", str(tmp_path / "r.db")]
    pipeline = str(root / "pipelines" / "code_qa.yaml")
    args = ["exec", pipeline, "--index", pg_url, "--json", *store, "--input", question]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "dbo.usp_PlaceOrder" in json.loads(result.stdout)["output"]["final_answer"]


@pg
def test_a_server_that_is_down_or_goes_away_is_coded(sample_index, pg_private_server):
    url = pg_private_server.create_database()
    indexcopy.copy_index(sample_index.path, url)
    store = open_index(url)
    assert store.search("BasketService", scope=PUBLIC, top_k=1)
    pg_private_server.stop("immediate")
    with pytest.raises(StoreError) as err:
        store.search("BasketService", scope=PUBLIC, top_k=1)
    assert err.value.code == "INDEX_UNAVAILABLE"
    with pytest.raises(StoreError) as err:
        open_index(url)
    assert err.value.code == "INDEX_UNAVAILABLE"
    store.close()


def test_the_terms_are_fts5s_own(tmp_path: Path):
    """Postgres stores the terms SQLite's FTS5 makes (same splitting and stemming)."""
    from runtime.retrieval.pgindex import terms

    [(found, length)] = terms().rows([("BasketService basket", "orders ordering", "zzr00")])
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    db.execute("INSERT INTO t VALUES ('orders ordering')")
    assert found == {"basketservic": (1, 0), "basket": (1, 0), "order": (0, 2)}
    assert length == 5
    assert terms().query("How are Orders placed?") == ["how", "ar", "order", "place"]


@pg
def test_a_term_too_long_for_a_btree_key_is_stored_and_found(pg_url):
    """A 5,000-character token (a base64 blob in a file) is indexed and matched exactly."""
    from runtime.retrieval.node import Node
    from runtime.retrieval.nodestore import node_row
    from runtime.retrieval.pgindex import PostgresNodeStore

    blob = "QUJD" * 1250
    store = PostgresNodeStore(pg_url, create=True)
    store.put_rows(
        [
            node_row(Node("r::s::file::a", "r", "s", "file", "a", "a", "a.txt", "text", text=blob)),
            node_row(
                Node(
                    "r::s::file::b",
                    "r",
                    "s",
                    "file",
                    "b",
                    "b",
                    "b.txt",
                    "text",
                    text=blob[:-4] + "QUJE",
                )
            ),
        ]
    )
    assert [h["id"] for h in store.search(blob, scope=Scope("r", "s"), top_k=5)] == [
        "r::s::file::a"
    ]
    store.close()


@pg
@pytest.mark.parametrize(
    "match",
    [
        '"order"',
        '"basket" AND "service"',
        '("cancel" OR "payment") AND "order"',
        'name : ("order" AND "place")',
        # a phrase counts only where every group around it matched (FTS5's rule): a node
        # holding "basket" without "service" matches by "basketservice" alone
        '"basketservice" OR ("basket" AND "service")',
        '("order" AND "payment") OR ("order" AND "cancel") OR ("payment" AND "cancel")',
        '("basket" AND "item") OR "customer"',
        '"order" NOT "payment"',
    ],
)
def test_bm25_is_fts5s_to_the_sixth_decimal(sample_index, pg_url, match):
    """Where the caller sees every node (FTS5 counts the whole table), each pass's BM25 on
    Postgres is SQLite's: the same nodes, order and scores."""
    indexcopy.copy_index(sample_index.path, pg_url)
    store = open_index(pg_url)
    want = sample_index._bm25(match, ALL, 25, None)
    got = store._bm25(match, ALL, 25, None)
    assert [h["id"] for h in got] == [h["id"] for h in want]
    assert [h["score"] for h in got] == pytest.approx([h["score"] for h in want], abs=2e-6)
    assert want
    store.close()
