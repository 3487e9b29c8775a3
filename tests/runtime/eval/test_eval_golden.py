"""The golden questions as cases files, and `runtime eval --retrieval` on the sample's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from runtime.cli import cli

ROOT = Path(__file__).resolve().parents[3]
SAMPLE_GOLDEN = ROOT / "tests" / "data" / "golden" / "cases" / "sample" / "eshop.yaml"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "golden_cases", ROOT / "benchmarks" / "golden_cases.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plain_index(tmp_path_factory):
    """The sample indexed as benchmarks/retrieval.py indexes it (no labels)."""
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    path = tmp_path_factory.mktemp("golden") / "index.db"
    index_paths(open_store(str(path), create=True), [str(ROOT / "pipelines" / "sample" / "eshop")],
                repository="eshop")  # fmt: skip
    return str(path)


def test_cases_files_equal_the_golden_json():
    stale = [
        str(p)
        for p, text in _generator().outputs().items()
        if not p.exists() or p.read_text() != text
    ]
    assert not stale, f"run python benchmarks/golden_cases.py: {stale}"


def test_every_golden_cases_file_loads():
    from runtime.eval.cases import load_cases

    files = sorted((ROOT / "tests" / "data" / "golden" / "cases").glob("*/*.yaml"))
    assert len(files) == 25
    counts = {p.parent.name: 0 for p in files}
    for p in files:
        counts[p.parent.name] += len(load_cases(str(p)).cases)
    assert counts == {"questions": 66, "heldout": 36, "heldout2": 36, "heldout3": 36, "sample": 30}


def test_retrieval_on_the_sample_reproduces_30_of_30(runner, tmp_path, plain_index, monkeypatch):
    monkeypatch.setenv("RUNTIME_EMBEDDER", "none-here")  # semantic and hybrid: not available
    res = runner.invoke(
        cli,
        ["eval", "--retrieval", str(SAMPLE_GOLDEN), "--index", plain_index, "--json"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    bm25 = out["modes"]["bm25"]
    assert bm25["all"]["found"] == 30 and bm25["all"]["n"] == 30
    assert out["modes"]["semantic"]["available"] is False
    assert out["modes"]["semantic"]["reason"].startswith("EMBEDDINGS_UNAVAILABLE")
    # every case's rank is in its row; the table prints the same figure
    assert all(r["found_at"] is not None and r["found_at"] <= 5 for r in bm25["cases"])
    table = runner.invoke(
        cli,
        ["eval", "--retrieval", str(SAMPLE_GOLDEN), "--index", plain_index, "--modes", "bm25"],
    )
    assert table.exit_code == 0
    assert "| bm25 |" in table.stdout and "30/30 (100%)" in table.stdout


def test_recall_at_k_is_cut_at_k(runner, tmp_path, plain_index):
    res = runner.invoke(
        cli,
        ["eval", "--retrieval", str(SAMPLE_GOLDEN), "--index", plain_index,
         "--modes", "bm25", "--k", "1", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    bm25 = json.loads(res.stdout)["modes"]["bm25"]
    firsts = sum(1 for r in bm25["cases"] if r["rank_in_10"] == 1)
    assert bm25["all"]["found"] == firsts < 30
