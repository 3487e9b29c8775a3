"""What a node is embedded as, the vectors every indexing run completes, and the coded error
for an index without vectors of the embedder."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from runtime.errors import StoreError
from runtime.retrieval.embeddings import VECTOR_TEXT, embedding_text, vector_model
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store

SAMPLE = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"
REALWORLD = Path(__file__).resolve().parent.parent / "data" / "realworld"
ESHOP = Scope("eshop", "main")


def test_a_node_is_embedded_as_its_kind_name_parent_and_doc_in_words():
    text = embedding_text(
        "method",
        "ClearAsync",
        "Eshop.Infrastructure.Repositories.BasketRepository.ClearAsync",
        "Empties a basket after an order was placed.",
    )
    assert text == (
        "method clear async in eshop infrastructure repositories basket repository. "
        "Empties a basket after an order was placed."
    )
    # No parent, no doc: the kind and the name's words alone (no dangling "in", no ". ").
    assert embedding_text("table", "OrderLines", "OrderLines", "") == "table order lines."
    assert embedding_text("partition_scheme", "ps_Date", "dbo.ps_Date", "") == (
        "partition scheme ps date in dbo."
    )


class Recording:
    """An embedder double that records what it was asked to embed."""

    name = "recording"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts += texts
        return [[float(len(t)), 1.0] for t in texts]


def _nodes(store) -> int:
    return store.conn().execute("SELECT count(*) FROM nodes").fetchone()[0]


def test_indexing_with_an_embedder_embeds_every_node_without_a_vector(tmp_path):
    """Unchanged files too: an index built without vectors gets them on the next run with an
    embedder, and a run after that embeds nothing."""
    store = open_store(str(tmp_path / "i.db"), create=True)
    assert index_paths(store, [str(SAMPLE)], repository="eshop").embedded == 0
    emb = Recording()
    report = index_paths(store, [str(SAMPLE)], repository="eshop", embedder=emb)
    assert report.unchanged == report.files and report.nodes == 0  # nothing was parsed
    assert report.embedded == _nodes(store) == len(emb.texts) > 100
    assert "method clear async in eshop infrastructure repositories basket repository. " in (
        "\n".join(emb.texts)
    )
    models = store.conn().execute("SELECT DISTINCT model FROM vectors").fetchall()
    assert models == [(f"recording#{VECTOR_TEXT}",)] == [(vector_model(emb),)]
    again = index_paths(store, [str(SAMPLE)], repository="eshop", embedder=emb)
    assert again.embedded == 0 and len(emb.texts) == report.embedded


def test_a_changed_file_is_embedded_again_and_only_it(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    for name in ("A", "B"):
        (root / f"{name}.cs").write_text(
            f"public class {name}\n{{\n    public void Run() {{ }}\n}}\n"
        )
    store = open_store(str(tmp_path / "i.db"), create=True)
    emb = Recording()
    first = index_paths(store, [str(root)], repository="r", embedder=emb).embedded
    (root / "B.cs").write_text("public class B\n{\n    public void Stop() { }\n}\n")
    emb.texts.clear()
    assert index_paths(store, [str(root)], repository="r", embedder=emb).embedded == 2
    assert sorted(emb.texts) == ["class b.", "method stop in b."] and first == 4


def test_vectors_of_an_older_vector_text_are_replaced_not_compared(tmp_path, hashing_embedder):
    """An index embedded by an older version (another vector text) is EMBEDDINGS_MISSING for
    semantic and hybrid search until indexed again, which then embeds every node anew."""
    path = tmp_path / "i.db"
    store = open_store(str(path), create=True)
    index_paths(store, [str(SAMPLE)], repository="eshop", embedder=hashing_embedder)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE vectors SET model = ?", (hashing_embedder.name,))  # the old name
    db.close()
    store = open_store(str(path))
    for kind in ("semantic", "hybrid"):
        with pytest.raises(StoreError) as info:
            store.search(
                "basket", scope=ESHOP, top_k=3, search_type=kind, embedder=hashing_embedder
            )
        assert info.value.code == "EMBEDDINGS_MISSING" and "hashing-256" in str(info.value)
    assert store.search("basket", scope=ESHOP, top_k=3)  # BM25 needs no vectors
    report = index_paths(store, [str(SAMPLE)], repository="eshop", embedder=hashing_embedder)
    assert report.embedded == _nodes(store)
    hits = store.search(
        "basket", scope=ESHOP, top_k=3, search_type="semantic", embedder=hashing_embedder
    )
    assert len(hits) == 3


def test_a_scope_without_nodes_is_no_hits_not_missing_vectors(tmp_path, hashing_embedder):
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(SAMPLE)], repository="eshop", embedder=hashing_embedder)
    hits = store.search(
        "basket", scope=Scope("other"), top_k=3, search_type="semantic", embedder=hashing_embedder
    )
    assert hits == []


def test_runtime_search_names_the_missing_vectors_and_the_fix(
    runner, tmp_path, minilm_dir, monkeypatch
):
    from runtime.cli import cli

    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(minilm_dir))
    index = str(tmp_path / "i.db")
    assert runner.invoke(cli, ["index", str(SAMPLE), "--index", index]).exit_code == 0
    result = runner.invoke(cli, ["search", "basket", "--index", index, "--type", "hybrid"])
    assert result.exit_code == 1, result.output
    assert "EMBEDDINGS_MISSING" in result.output and "--embedder" in result.output
    assert "Traceback" not in result.output


def test_runtime_search_refuses_an_empty_query(runner, tmp_path):
    from runtime.cli import cli

    index = str(tmp_path / "i.db")
    assert runner.invoke(cli, ["index", str(SAMPLE), "--index", index]).exit_code == 0
    for query in ("", "   "):
        result = runner.invoke(cli, ["search", query, "--index", index])
        assert result.exit_code == 2 and "QUERY_EMPTY" in result.output, result.output


def test_the_index_report_counts_the_embedded_nodes(runner, tmp_path, minilm_dir, monkeypatch):
    from runtime.cli import cli

    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(minilm_dir))
    index = str(tmp_path / "i.db")
    result = runner.invoke(
        cli, ["index", str(SAMPLE), "--index", index, "--embedder", "minilm", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["embedded"] == out["nodes"] > 100
    result = runner.invoke(cli, ["index", str(SAMPLE), "--index", index, "--embedder", "minilm"])
    assert "0 node(s) embedded" in result.output


def test_a_scope_whose_nodes_have_no_vectors_is_missing_vectors(tmp_path, hashing_embedder):
    """One repository embedded, another not: semantic search in the second is
    EMBEDDINGS_MISSING naming its nodes, never an empty list."""
    store = open_store(str(tmp_path / "i.db"), create=True)
    index_paths(store, [str(SAMPLE)], repository="eshop", embedder=hashing_embedder)
    index_paths(store, [str(REALWORLD / "wwi")], repository="wwi")
    wwi_nodes = store.conn().execute("SELECT count(*) FROM nodes WHERE repository = 'wwi'")
    with pytest.raises(StoreError) as info:
        store.search(
            "city", scope=Scope("wwi"), top_k=3, search_type="hybrid", embedder=hashing_embedder
        )
    assert info.value.code == "EMBEDDINGS_MISSING"
    assert f"none of the {wwi_nodes.fetchone()[0]} node(s) in scope" in str(info.value)
    hits = store.search(
        "basket", scope=ESHOP, top_k=3, search_type="semantic", embedder=hashing_embedder
    )
    assert len(hits) == 3


def test_indexing_without_the_embedder_notes_the_nodes_left_without_vectors(
    runner, tmp_path, minilm_dir, monkeypatch
):
    from runtime.cli import cli

    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(minilm_dir))
    tree = tmp_path / "src"
    shutil.copytree(SAMPLE, tree)
    index = str(tmp_path / "i.db")
    args = ["index", str(tree), "--index", index, "--repository", "eshop"]
    first = runner.invoke(cli, [*args, "--embedder", "minilm"])
    assert first.exit_code == 0 and "note:" not in first.stderr, first.output
    basket = tree / "src" / "Eshop.Core" / "Services" / "BasketService.cs"
    basket.write_text(basket.read_text() + "\npublic class Wishlist { public void Keep() { } }\n")
    second = runner.invoke(cli, args)
    assert second.exit_code == 0, second.output
    changed = second.stderr.strip().splitlines()
    assert len(changed) == 1 and changed[0].startswith("note: ")
    assert "of eshop@main have no all-MiniLM-L6-v2#names1 vector" in changed[0]
    missing = int(changed[0].split()[1])
    assert missing >= 3  # the file's nodes: its old ones again, Wishlist and Keep
    third = runner.invoke(cli, [*args, "--embedder", "minilm", "--json"])
    assert json.loads(third.stdout)["embedded"] == missing
    assert "note:" not in runner.invoke(cli, args).stderr
