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
