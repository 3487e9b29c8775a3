"""BM25 reads the label list and runs its MATCH queries in one snapshot of the index.

The hidden labels of a search are read from cached index statistics and written into
the FTS5 expression; a writer committing a node with a new label between that read and
the ranked query must not see it slip through. A second connection writes exactly there
(from a trace hook on the reading connection).
"""

from __future__ import annotations

import pytest

from runtime.retrieval.node import Node, Scope
from runtime.retrieval.nodestore import SqliteNodeStore


def _node(name: str, path: str, labels: list[str]) -> Node:
    return Node(
        id=f"r::s::method::Stock.{name}",
        repository="r",
        snapshot="s",
        kind="method",
        name=name,
        qualified_name=f"Stock.{name}",
        path=path,
        language="dotnet",
        text=f"public void {name}() {{ ReserveStock(order); }}",
        labels=labels,
    )


@pytest.fixture
def stores(tmp_path):
    path = str(tmp_path / "index.db")
    reader = SqliteNodeStore(path, create=True)
    reader.replace_file("r", "s", "Open.cs", "h1", [_node("ReserveOpen", "Open.cs", [])], None)
    writer = SqliteNodeStore(path)  # a second connection, as another process would have
    return reader, writer


SCOPE = Scope(repository="r", snapshot="s")  # no labels allowed: labelled nodes are hidden
QUERY = "reserve secret"  # its first ranked query (adjacent words joined) names the new node


def _ids(hits):
    return [h["id"] for h in hits]


def test_a_label_committed_between_the_statements_of_a_search_stays_hidden(stores):
    reader, writer = stores
    assert _ids(reader.bm25(QUERY, scope=SCOPE, top_k=5)) == ["r::s::method::Stock.ReserveOpen"]
    written: list[str] = []

    def between(sql: str) -> None:
        # The ranked FTS5 query is about to run: the label list was already read.
        if "ORDER BY score" in sql and not written:
            written.append(sql)
            writer.replace_file(
                "r", "s", "Secret.cs", "h2", [_node("ReserveSecret", "Secret.cs", ["pii"])], None
            )

    reader.conn().set_trace_callback(between)
    try:
        hits = reader.bm25(QUERY, scope=SCOPE, top_k=5)
    finally:
        reader.conn().set_trace_callback(None)
    assert len(written) == 1  # the write did happen in the middle of the search
    assert _ids(hits) == ["r::s::method::Stock.ReserveOpen"]
    # The next search sees the new node and its new label, and still hides it.
    assert _ids(reader.bm25(QUERY, scope=SCOPE, top_k=5)) == ["r::s::method::Stock.ReserveOpen"]
    allowed = Scope(repository="r", snapshot="s", allowed_labels=("pii",))
    assert sorted(_ids(reader.bm25(QUERY, scope=allowed, top_k=5))) == [
        "r::s::method::Stock.ReserveOpen",
        "r::s::method::Stock.ReserveSecret",
    ]


def test_a_search_leaves_no_transaction_open(stores):
    reader, _writer = stores
    reader.bm25(QUERY, scope=SCOPE, top_k=5)
    assert not reader.conn().in_transaction
