"""The node store: identifier-aware BM25, scope and label filters, narrowing filters, hybrid."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store
from runtime.retrieval.query import fts_query
from runtime.retrieval.words import split_identifier

SAMPLE_ROOT = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"

ALL = Scope("eshop", "main", ("confidential",))
PUBLIC = Scope("eshop", "main")


def test_split_identifier_and_query():
    assert split_identifier("BasketService") == ["basket", "service"]
    assert split_identifier("basket_service") == ["basket", "service"]
    assert split_identifier("usp_PlaceOrder") == ["usp", "place", "order"]
    assert fts_query("how does the BasketService work") == (
        '("basketservice" OR ("basket" AND "service")) OR "work"'
    )
    assert fts_query("basket service") == '"basket" OR "service" OR "basketservice"'


@pytest.mark.parametrize("query", ["BasketService", "basket_service", "basket service"])
def test_identifier_spellings_reach_the_same_code(sample_index, query):
    hits = sample_index.search(query, scope=PUBLIC, top_k=3, per_file=0)
    assert {h["path"] for h in hits} == {"src/Eshop.Core/Services/BasketService.cs"}
    assert hits[0]["id"] == "eshop::main::class::Eshop.Core.Services.BasketService"
    # Its constructor restates the class: searched as part of it, listed under it.
    assert hits[0]["children"] == [
        "eshop::main::constructor::Eshop.Core.Services.BasketService.BasketService.ctor"
    ]
    assert all(
        set(h) - {"children"} == {"id", "score", "rank", "path", "kind", "name"} for h in hits
    )
    assert [h["rank"] for h in hits] == [1, 2, 3]
    # With the default per-file cap of 2, the third hit comes from another file.
    capped = sample_index.search(query, scope=PUBLIC, top_k=3)
    assert capped[:2] == hits[:2]
    assert capped[2]["path"] != "src/Eshop.Core/Services/BasketService.cs"


def test_ids_are_stable_and_readable(sample_index):
    [hit] = sample_index.search("usp_CancelOrder", scope=PUBLIC, top_k=1)
    assert hit["id"] == "eshop::main::procedure::dbo.usp_CancelOrder"


def test_labelled_nodes_need_every_label_allowed(sample_index):
    pid = "eshop::main::procedure::dbo.usp_CapturePayment"
    assert pid not in {
        h["id"] for h in sample_index.search("usp_CapturePayment", scope=PUBLIC, top_k=20)
    }
    assert pid in {h["id"] for h in sample_index.search("usp_CapturePayment", scope=ALL, top_k=20)}
    assert sample_index.get_nodes([pid], scope=PUBLIC) == {}
    assert set(sample_index.get_nodes([pid], scope=ALL)) == {pid}


def test_repository_and_snapshot_scope(sample_index):
    assert sample_index.search("Order", scope=Scope("other"), top_k=5) == []
    assert sample_index.search("Order", scope=Scope(None, "v9"), top_k=5) == []
    assert sample_index.search("Order", scope=Scope(), top_k=5)


def test_narrowing_filters(sample_index):
    hits = sample_index.search("order", scope=PUBLIC, top_k=30, filters={"language": "sql"})
    assert hits and all(h["path"].endswith(".sql") for h in hits)
    hits = sample_index.search("order", scope=PUBLIC, top_k=30, filters={"kind": ["table"]})
    assert {h["kind"] for h in hits} == {"table"}
    hits = sample_index.search(
        "order", scope=PUBLIC, top_k=30, filters={"path_prefix": "src/Eshop.Api/"}
    )
    assert hits and all(h["path"].startswith("src/Eshop.Api/") for h in hits)


def test_edges_respect_scope(sample_index):
    repo = "eshop::main::method::Eshop.Infrastructure.Repositories.PaymentRepository.CaptureAsync"
    proc = "eshop::main::procedure::dbo.usp_CapturePayment"
    assert (repo, proc, "UsesSql") in sample_index.edges([repo], scope=ALL)
    assert (repo, proc, "UsesSql") not in sample_index.edges([repo], scope=PUBLIC)


def test_hybrid_and_semantic_with_an_explicit_embedder(tmp_path, hashing_embedder):
    emb = hashing_embedder
    store = open_store(str(tmp_path / "v.db"), create=True)
    index_paths(store, [str(SAMPLE_ROOT / "src")], repository="r", embedder=emb)
    sem = store.search(
        "basket items", scope=Scope("r"), top_k=5, search_type="semantic", embedder=emb
    )
    assert len(sem) == 5 and sem[0]["score"] >= sem[-1]["score"]
    hyb = store.search(
        "basket items", scope=Scope("r"), top_k=5, search_type="hybrid", embedder=emb
    )
    assert [h["rank"] for h in hyb] == [1, 2, 3, 4, 5]
    assert all(h["score"] <= 2 / 6 + 1e-6 for h in hyb)  # reciprocal rank fusion scores, k=5


def test_missing_index_is_coded(tmp_path):
    with pytest.raises(StoreError) as info:
        open_store(str(tmp_path / "none.db"))
    assert info.value.code == "INDEX_NOT_FOUND"


def _node(repo: str, name: str, labels: list[str]):
    from runtime.retrieval.node import Node, node_id

    return Node(
        node_id(repo, "main", "class", name),
        repo,
        "main",
        "class",
        name,
        name,
        f"{name}.cs",
        "dotnet",
        1,
        1,
        f"class {name} {{ void Reconcile() {{}} }}",
        labels=labels,
    )


def test_cached_statistics_follow_writes_from_another_connection(tmp_path):
    """A reader's cached labels and repositories never let a newer node slip through."""
    path = str(tmp_path / "s.db")
    writer = open_store(path, create=True)
    writer.replace_file("a", "main", "A.cs", "1", [_node("a", "Ledger", [])], {})
    reader = open_store(path)
    scope = Scope("a", "main")
    assert [h["name"] for h in reader.search("reconcile", scope=scope, top_k=5)] == ["Ledger"]
    # Another connection adds a labelled node in scope and a node of another repository.
    writer.replace_file("a", "main", "S.cs", "2", [_node("a", "Secret", ["hr"])], {})
    writer.replace_file("b", "main", "B.cs", "3", [_node("b", "Other", [])], {})
    writer.replace_file("a", "main", "P.cs", "4", [_node("a", "Plain", [])], {})
    names = {h["name"] for h in reader.search("reconcile", scope=scope, top_k=5)}
    assert names == {"Ledger", "Plain"}
    allowed = Scope("a", "main", ("hr",))
    assert {h["name"] for h in reader.search("reconcile", scope=allowed, top_k=5)} == {
        "Ledger",
        "Plain",
        "Secret",
    }


def test_any_word_pass_keeps_the_rarest_words(tmp_path, monkeypatch):
    """Common words drop out of the any-word pass once over the budget; the rarest stays."""
    import runtime.retrieval.search as ns

    monkeypatch.setattr(ns, "ANY_PASS_POSTINGS", 4)
    store = open_store(str(tmp_path / "c.db"), create=True)
    nodes = [_node("a", f"Common{i}", []) for i in range(6)]
    for n in nodes:
        n.text = "ledger entry"
    nodes[0].text = "ledger audit"
    store.replace_file("a", "main", "A.cs", "1", nodes, {})
    # "audit" (1 node) fits, "ledger" (6 nodes) would exceed 4: the any pass ranks audit only.
    assert store._selective_any("audit ledger", Scope()) == '"audit" OR "auditledger"'
    rarest = store._selective_any("ledger entry", Scope())
    assert rarest == '"entry" OR "ledgerentry"'  # rarest stays
    hits = store.search("audit ledger", scope=Scope("a"), top_k=5)
    assert hits[0]["name"] == "Common0"  # every word: first, from the all-words pass


def test_words_written_as_names():
    from runtime.retrieval.query import named_words, without_kind_words

    assert named_words("What columns does the Orders table have?") == ["Orders"]
    assert named_words("Who calls usp_PlaceOrder from BasketService") == [
        "usp_PlaceOrder",
        "BasketService",
    ]
    assert named_words("Orders placed today") == []  # a capital starting the question
    assert without_kind_words("Which stored procedure writes a table?").split() == [
        "Which",
        "stored",
        "writes",
        "a",
        "?",
    ]


def test_a_name_in_the_question_comes_first(sample_index):
    hits = sample_index.search("What columns does the Orders table have?", scope=PUBLIC, top_k=5)
    assert hits[0]["id"] == "eshop::main::table::dbo.Orders"


def test_words_every_node_has_do_not_exclude_the_answer(sample_index):
    """'order' is in most nodes of an order system: requiring it would drop ReserveAsync."""
    hits = sample_index.search("How is stock reserved for an order?", scope=PUBLIC, top_k=5)
    assert "eshop::main::method::Eshop.Core.Services.InventoryService.ReserveAsync" in {
        h["id"] for h in hits
    }


def test_sql_comments_and_columns_are_searchable(sample_index):
    [hit] = sample_index.search("puts its stock back", scope=ALL, top_k=1)
    assert hit["id"] == "eshop::main::procedure::dbo.usp_CancelOrder"  # from its header comment
    # A CREATE TABLE never says "column"; the words describing its metadata do.
    hits = sample_index.search("columns", scope=ALL, top_k=30, filters={"kind": "table"})
    assert len(hits) == 9  # every table of the sample
    node = sample_index.get_nodes(["eshop::main::table::dbo.Customers"], scope=ALL)
    assert "column" not in node["eshop::main::table::dbo.Customers"].text.lower()


def test_recall_at_5_on_the_question_set(sample_index):
    """The questions of benchmarks/retrieval.py: each needs an expected node in the top 5."""
    import json

    path = Path(__file__).resolve().parent.parent / "data" / "retrieval" / "questions.json"
    questions = json.loads(path.read_text())
    found = 0
    for item in questions:
        ids = {h["id"] for h in sample_index.search(item["q"], scope=ALL, top_k=5)}
        found += bool(ids & set(item["expect"]))
    assert found / len(questions) >= 0.9


def test_opening_an_index_to_read_writes_nothing(tmp_path):
    import sqlite3

    path = str(tmp_path / "r.db")
    open_store(path, create=True).replace_file("a", "main", "A.cs", "1", [_node("a", "L", [])], {})
    watcher = sqlite3.connect(path)
    before = watcher.execute("PRAGMA data_version").fetchone()[0]
    open_store(path).search("reconcile", scope=Scope("a"), top_k=1)
    assert watcher.execute("PRAGMA data_version").fetchone()[0] == before
    watcher.close()
