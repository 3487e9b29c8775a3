"""`runtime index` and `runtime search`."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.cli import cli

SAMPLE_ROOT = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"


def test_index_then_search_json(runner, tmp_path):
    idx = str(tmp_path / "i.db")
    labels = tmp_path / "labels.yaml"
    labels.write_text('"Database/Procedures/*": [dba]\n')
    result = runner.invoke(
        cli,
        [
            "index",
            str(SAMPLE_ROOT),
            "--index",
            idx,
            "--repository",
            "eshop",
            "--labels",
            str(labels),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert set(report) == {"files", "nodes", "edges", "skipped", "seconds"}
    assert report["files"] == 26 and report["nodes"] > 100
    found = runner.invoke(
        cli,
        ["search", "who cancels an order", "--index", idx, "--top-k", "5", "--json"],
        catch_exceptions=False,
    )
    assert found.exit_code == 0
    hits = json.loads(found.stdout)["hits"]
    assert len(hits) == 5 and set(hits[0]) == {"id", "score", "rank", "path", "kind", "name"}
    assert not any(h["kind"] == "procedure" for h in hits)  # labelled dba, not allowed here
    with_label = runner.invoke(
        cli, ["search", "usp_CancelOrder", "--index", idx, "--label", "dba", "--json"]
    )
    assert (
        json.loads(with_label.stdout)["hits"][0]["id"]
        == "eshop::main::procedure::dbo.usp_CancelOrder"
    )
    text = runner.invoke(cli, ["search", "BasketService", "--index", idx, "--snapshot", "main"])
    assert text.exit_code == 0 and "BasketService.cs" in text.stdout


def test_a_repository_or_snapshot_the_index_lacks_is_a_usage_error(runner, tmp_path):
    """A typo in --repository or --snapshot is named, with the near name, never "no hits"."""
    idx = str(tmp_path / "i.db")
    assert runner.invoke(cli, ["index", str(SAMPLE_ROOT), "--index", idx]).exit_code == 0
    for option, value, near in (
        ("--repository", "eshp", "did you mean 'eshop'?"),
        ("--snapshot", "mian", "did you mean 'main'?"),
        ("--repository", "payroll", "(it holds eshop)"),
    ):
        result = runner.invoke(cli, ["search", "basket", "--index", idx, option, value])
        assert result.exit_code == 2, result.output
        assert f"{option} {value!r}: the index holds no such" in result.stderr
        assert near in result.stderr and "Traceback" not in result.output
    held = runner.invoke(cli, ["search", "basket", "--index", idx, "--repository", "eshop"])
    assert held.exit_code == 0 and "Basket" in held.stdout


def test_a_query_of_stop_words_says_it_has_nothing_to_search(runner, tmp_path):
    idx = str(tmp_path / "i.db")
    assert runner.invoke(cli, ["index", str(SAMPLE_ROOT), "--index", idx]).exit_code == 0
    empty = runner.invoke(cli, ["search", "is it the a", "--index", idx])
    assert empty.exit_code == 0
    assert empty.stdout == "no hits: the query has no word to search for\n"
    none = runner.invoke(cli, ["search", "zzqx", "--index", idx])
    assert none.exit_code == 0 and none.stdout == "no hits\n"


def test_search_without_index_is_coded(runner, tmp_path):
    result = runner.invoke(cli, ["search", "x", "--index", str(tmp_path / "none.db")])
    assert result.exit_code == 1 and "INDEX_NOT_FOUND" in result.stderr


def test_bad_labels_file_is_a_usage_error(runner, tmp_path):
    bad = tmp_path / "l.json"
    bad.write_text('{"*": "not a list"}')
    result = runner.invoke(
        cli, ["index", str(SAMPLE_ROOT), "--index", str(tmp_path / "i.db"), "--labels", str(bad)]
    )
    assert result.exit_code == 2 and "labels file" in result.stderr


def test_jobs_option(runner, tmp_path, monkeypatch):
    import runtime.retrieval.indexer as indexer

    monkeypatch.setattr(indexer, "PARALLEL_MIN_FILES", 1)  # the sample is small
    reports = []
    for jobs in ("1", "2"):
        result = runner.invoke(
            cli,
            ["index", str(SAMPLE_ROOT), "--index", str(tmp_path / f"{jobs}.db"), "--jobs", jobs],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.stderr
        reports.append(result.stdout.split(":")[1].split(",")[0])  # "... N node(s) written"
    assert reports[0] == reports[1]
    bad = runner.invoke(cli, ["index", str(SAMPLE_ROOT), "--jobs", "0"])
    assert bad.exit_code == 2 and "--jobs" in bad.stderr


def test_an_old_index_is_refused_with_a_code(runner, tmp_path):
    import sqlite3

    idx = str(tmp_path / "i.db")
    assert runner.invoke(cli, ["index", str(SAMPLE_ROOT), "--index", idx]).exit_code == 0
    db = sqlite3.connect(idx)
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    found = runner.invoke(cli, ["search", "order", "--index", idx])
    assert found.exit_code == 1 and "INDEX_FORMAT" in found.stderr
    again = runner.invoke(cli, ["index", str(SAMPLE_ROOT), "--index", idx])
    assert again.exit_code == 0 and "rebuilt from scratch" in again.stderr
    assert runner.invoke(cli, ["search", "order", "--index", idx]).exit_code == 0


SEMANTIC_TOP3 = ("--type", "semantic", "--top-k", "3", "--json")


def test_semantic_search_from_the_cli_with_the_real_model(
    runner, tmp_path, minilm_dir, minilm_cached, monkeypatch
):
    import runtime.retrieval.embeddings

    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(minilm_dir))
    # `--embedder minilm` loads the real model through this; its vectors are cached across runs.
    monkeypatch.setattr(runtime.retrieval.embeddings, "_minilm", lambda model_dir: minilm_cached)
    idx = str(tmp_path / "i.db")
    src = SAMPLE_ROOT / "Database"
    done = runner.invoke(cli, ["index", str(src), "--index", idx, "--embedder", "minilm", "--json"])
    assert done.exit_code == 0, done.stderr
    found = runner.invoke(
        cli,
        ["search", "undo a purchase and return the goods", "--index", idx, *SEMANTIC_TOP3],
    )
    assert found.exit_code == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert "Database::main::procedure::dbo.usp_CancelOrder" in [h["id"] for h in hits]


def test_semantic_search_without_the_model_is_coded(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNTIME_MINILM_DIR", str(tmp_path / "nothing"))
    idx = str(tmp_path / "i.db")
    assert (
        runner.invoke(cli, ["index", str(SAMPLE_ROOT / "Database"), "--index", idx]).exit_code == 0
    )
    found = runner.invoke(cli, ["search", "x", "--index", idx, "--type", "semantic"])
    assert found.exit_code == 1 and "EMBEDDINGS_UNAVAILABLE" in found.stderr
    assert "pip install" in found.stderr or "model.safetensors" in found.stderr


def test_failed_files_are_warned_and_listed(runner, tmp_path, break_extraction):
    break_extraction("usp_LogEvent.sql", ValueError("boom"))
    result = runner.invoke(
        cli, ["index", str(SAMPLE_ROOT), "--index", str(tmp_path / "i.db"), "--jobs", "1", "--json"]
    )
    assert result.exit_code == 0
    assert (
        "warning: Database/Procedures/usp_LogEvent.sql not indexed: ValueError: boom"
        in result.stderr
    )
    assert json.loads(result.stdout)["failed"] == [
        {"path": "Database/Procedures/usp_LogEvent.sql", "error": "ValueError: boom"}
    ]


def test_files_not_in_utf8_are_noted(runner, tmp_path):
    src = tmp_path / "db"
    src.mkdir()
    (src / "p.sql").write_bytes(
        "-- Réservé\nCREATE PROCEDURE dbo.p AS SELECT 1;\n".encode("cp1252")
    )
    result = runner.invoke(cli, ["index", str(src), "--index", str(tmp_path / "i.db")])
    assert result.exit_code == 0
    assert "1 file(s) were not UTF-8" in result.stderr and "p.sql: windows-1252" in result.stderr


def tree(root: Path) -> Path:
    """A small tree: two procedures of the sample."""
    root.mkdir()
    for name in ("usp_CancelOrder.sql", "usp_PlaceOrder.sql"):
        (root / name).write_text((SAMPLE_ROOT / "Database" / "Procedures" / name).read_text())
    return root


def repositories(runner, idx: str) -> list[str]:
    """The repository of each hit for "order" (the first part of a node id)."""
    found = runner.invoke(cli, ["search", "order", "--index", idx, "--json"])
    return [h["id"].split("::")[0] for h in json.loads(found.stdout)["hits"]]


def test_indexing_a_tree_again_without_repository_keeps_its_name(runner, tmp_path):
    src, idx = tree(tmp_path / "src"), str(tmp_path / "i.db")
    first = runner.invoke(
        cli, ["index", str(src), "--index", idx, "--repository", "shop", "--json"]
    )
    assert first.exit_code == 0 and json.loads(first.stdout)["nodes"] == 2
    again = runner.invoke(cli, ["index", str(src), "--index", idx, "--json"])
    assert again.exit_code == 0
    assert json.loads(again.stdout)["nodes"] == 0  # unchanged: no second copy written
    assert repositories(runner, idx) == ["shop", "shop"]


def test_a_new_tree_is_named_after_its_folder(runner, tmp_path):
    src, idx = tree(tmp_path / "billing"), str(tmp_path / "i.db")
    done = runner.invoke(cli, ["index", str(src), "--index", idx])
    assert done.exit_code == 0, done.stderr
    assert repositories(runner, idx) == ["billing", "billing"]


def test_several_paths_without_repository_are_refused(runner, tmp_path):
    a, b, idx = tree(tmp_path / "a"), tree(tmp_path / "b"), tmp_path / "i.db"
    result = runner.invoke(cli, ["index", str(a), str(b), "--index", str(idx)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: REPOSITORY_REQUIRED: 2 paths and no --repository: name the repository they form",
        "hint: Pass --repository NAME.",
    ]
    assert not idx.exists()


def test_another_name_for_an_indexed_tree_is_said_and_then_must_be_chosen(runner, tmp_path):
    src, idx = tree(tmp_path / "src"), str(tmp_path / "i.db")
    assert (
        runner.invoke(cli, ["index", str(src), "--index", idx, "--repository", "shop"]).exit_code
        == 0
    )
    other = runner.invoke(cli, ["index", str(src), "--index", idx, "--repository", "eshop"])
    assert other.exit_code == 0
    assert other.stderr == (
        f"warning: {src} is also indexed as repository shop; this stores another copy as 'eshop'\n"
    )
    which = runner.invoke(cli, ["index", str(src), "--index", idx])
    assert which.exit_code == 2
    assert which.stderr.splitlines()[0] == (
        "error: REPOSITORY_REQUIRED: these paths are indexed as repositories eshop, shop; "
        "say which with --repository"
    )
