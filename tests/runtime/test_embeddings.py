"""The real all-MiniLM-L6-v2 encoder (numpy), semantic and hybrid search with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.retrieval.embeddings import MiniLMEmbedder, make_embedder
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

DATA = Path(__file__).resolve().parent.parent / "data"
SAMPLE_ROOT = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return MiniLMEmbedder(minilm_dir)


def test_vectors_match_sentence_transformers(minilm):
    """Reference vectors were computed by sentence-transformers with torch (see the file)."""
    ref = json.loads((DATA / "embeddings" / "minilm_reference.json").read_text())
    got = minilm.embed(ref["texts"])  # includes a text longer than the 256-token cut
    for vector, expected in zip(got, ref["vectors"], strict=True):
        assert len(vector) == 384
        assert max(abs(a - b) for a, b in zip(vector, expected, strict=True)) < 1e-5
    # Batching and padding change nothing: one text alone gives the same vector.
    [alone] = minilm.embed(ref["texts"][3:4])
    assert max(abs(a - b) for a, b in zip(alone, got[3], strict=True)) < 1e-6


@pytest.fixture(scope="module")
def semantic_index(tmp_path_factory, minilm_cached):
    """The sample indexed with the real model's vectors (cached across runs: see conftest)."""
    store = open_store(str(tmp_path_factory.mktemp("sem") / "i.db"), create=True)
    index_paths(store, [str(SAMPLE_ROOT)], repository="eshop", embedder=minilm_cached)
    return store


@pytest.fixture(scope="module")
def find(semantic_index, minilm_cached):
    """find(query, kind, top_k, repository, snapshot): the hits of one search with MiniLM."""

    def search(query, kind, top_k=5, repository="eshop", snapshot="main"):
        scope = Scope(repository, snapshot)
        return semantic_index.search(
            query, scope=scope, top_k=top_k, search_type=kind, embedder=minilm_cached
        )

    return search


def test_semantic_search_finds_meaning_without_shared_words(find):
    # "remove everything from the shopping cart" shares no word with ClearAsync's code
    # ("Empties a basket after an order was placed").
    hits = find("remove everything from the shopping cart", "semantic")
    assert len(hits) == 5 and hits[0]["score"] >= hits[-1]["score"]
    assert any("ClearAsync" in h["id"] for h in hits)
    bm25 = find("remove everything from the shopping cart", "bm25")
    assert not any("ClearAsync" in h["id"] for h in bm25)


def test_hybrid_search_fuses_both_rankings(find):
    hits = find("Which stored procedure places an order?", "hybrid")
    assert "eshop::main::procedure::dbo.usp_PlaceOrder" in [h["id"] for h in hits[:2]]
    assert [h["rank"] for h in hits] == [1, 2, 3, 4, 5]
    assert all(h["score"] <= 2 / 6 + 1e-6 for h in hits)  # reciprocal rank fusion, k=5


@pytest.mark.pins  # the real model is what produces the case: the mutation tool runs it
def test_a_hybrid_hit_is_one_thing_once(find):
    """ClearAsync is folded into BasketRepository by the semantic list (three of its members
    match) and found alone by BM25: hybrid lists it once, under the class."""
    hits = find("empty the shopping cart", "hybrid", top_k=8)
    ids = {h["id"] for h in hits}
    kids = [c for h in hits for c in h.get("children", [])]
    assert not ids & set(kids) and len(kids) == len(set(kids))
    [repo] = [h for h in hits if h["id"].endswith("Repositories.BasketRepository")]
    assert (
        "eshop::main::method::Eshop.Infrastructure.Repositories.BasketRepository.ClearAsync"
        in (repo["children"])
    )


def test_semantic_search_respects_labels(find):
    hidden = "eshop::main::procedure::dbo.usp_CapturePayment"  # no label here: visible
    hits = find("record a captured payment", "semantic", top_k=10, snapshot=None)
    assert hidden in {h["id"] for h in hits}
    other = find(
        "record a captured payment", "semantic", top_k=10, repository="other", snapshot=None
    )
    assert other == []


def test_missing_model_files_are_a_coded_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(tmp_path))
    with pytest.raises(StoreError) as info:
        make_embedder("minilm")
    assert info.value.code == "EMBEDDINGS_UNAVAILABLE"
    assert "model.safetensors" in str(info.value)


def test_the_encoder_loads_once_per_model_folder(minilm_dir, monkeypatch):
    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(minilm_dir))
    assert make_embedder("minilm") is make_embedder("minilm")


def test_a_pipeline_searches_semantically_with_the_real_model(
    semantic_index, minilm_dir, monkeypatch
):
    """search_nodes with search_type semantic, through the engine, the model from settings' env."""
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.format.pipeline import Pipeline

    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(minilm_dir))
    settings = {"entry_step_id": "s"}
    steps = [
        {
            "id": "s",
            "action": "search_nodes",
            "query_from": "q",
            "search_type": "hybrid",
            "top_k": 5,
            "next": "end",
        },
        {"id": "end", "action": "finalize", "source": "retrieval_query"},
    ]
    engine = Engine(
        Pipeline.from_dict({"settings": settings, "steps": steps}),
        services=Services(settings=settings, node_store=semantic_index),
    )
    state = engine.run(
        {
            "q": "empty the shopping cart",
            "repository": "eshop",
            "snapshot": "main",
        },
        run_id="sem",
    ).state
    assert state["retrieval_mode"] == "hybrid"
    # The hit itself, or one of a type's matching members listed under it (MEMBER_FOLD).
    held = {c for h in state["retrieval_hits"] for c in h.get("children", ())}
    assert any("ClearAsync" in nid for nid in [*state["retrieval_seed_nodes"], *held])
