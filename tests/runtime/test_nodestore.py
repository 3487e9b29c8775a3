"""The node store: identifier-aware BM25, scope and label filters, narrowing filters, hybrid."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.embeddings import HashingEmbedder
from runtime.errors import StoreError
from runtime.indexer import index_paths
from runtime.nodestore import Scope, fts_query, open_store, split_identifier

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
    hits = sample_index.search(query, scope=PUBLIC, top_k=3)
    assert {h["path"] for h in hits} == {"src/Eshop.Core/Services/BasketService.cs"}
    assert all(set(h) == {"id", "score", "rank", "path", "kind", "name"} for h in hits)
    assert [h["rank"] for h in hits] == [1, 2, 3]


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


def test_hybrid_and_semantic_with_an_explicit_embedder(tmp_path):

    emb = HashingEmbedder()
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
    assert all(h["score"] <= 2 / 61 + 1e-6 for h in hyb)  # reciprocal rank fusion scores, k=60


def test_missing_index_is_coded(tmp_path):
    with pytest.raises(StoreError) as info:
        open_store(str(tmp_path / "none.db"))
    assert info.value.code == "INDEX_NOT_FOUND"
