"""`runtime inspect`."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.cli import cli
from runtime.context.tokens import get_counter

SAMPLE = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"


def test_inspect_json_contract(runner):
    path = SAMPLE / "Database" / "Procedures" / "usp_CancelOrder.sql"
    result = runner.invoke(cli, ["inspect", str(path), "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert {
        "kind",
        "language",
        "confidence",
        "tokens",
        "symbols",
        "dependencies",
        "compact",
    } <= set(info)
    assert (info["kind"], info["language"]) == ("SQL", "sql")
    assert info["tokens"] == get_counter().count(path.read_text())
    assert [s["qualified_name"] for s in info["symbols"]] == ["dbo.usp_CancelOrder"]
    assert {
        "from_qualified_name": "dbo.usp_CancelOrder",
        "to_name": "dbo.Orders",
        "edge_type": "WritesTo",
        "line": 2,
    } in info["dependencies"]
    assert (
        info["compact"]["tokens"] == get_counter().count(info["compact"]["text"]) < info["tokens"]
    )


def test_inspect_text_for_csharp(runner):
    path = SAMPLE / "src" / "Eshop.Infrastructure" / "Repositories" / "OrderRepository.cs"
    result = runner.invoke(cli, ["inspect", str(path)], catch_exceptions=False)
    assert result.exit_code == 0
    assert "DOTNET_WITH_SQL (dotnet)" in result.stdout
    assert "-UsesSql-> dbo.usp_PlaceOrder" in result.stdout


def test_inspect_missing_file_is_usage_error(runner, tmp_path):
    assert runner.invoke(cli, ["inspect", str(tmp_path / "nope.cs")]).exit_code == 2
    binary = tmp_path / "b.cs"
    binary.write_bytes(b"\xff\xfe\x00")
    assert runner.invoke(cli, ["inspect", str(binary)]).exit_code == 2
