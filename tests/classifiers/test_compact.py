"""compact(): shorter, honest about what it elides, deterministic, budget-aware."""

from __future__ import annotations

from pathlib import Path

import pytest

import classifiers
from runtime.context.tokens import get_counter

SAMPLE = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"
FILES = sorted(SAMPLE.rglob("*.cs")) + sorted(SAMPLE.rglob("*.sql"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_never_longer_and_states_elisions(path):
    counter = get_counter()
    text = path.read_text()
    lang = "dotnet" if path.suffix == ".cs" else "sql"
    out = classifiers.compact(text, lang)
    assert counter.count(out) <= counter.count(text)
    assert out == classifiers.compact(text, lang)  # deterministic
    if out != text:
        assert "elided" in out


def test_sql_keeps_headers_columns_keys_and_body_summary():
    text = (SAMPLE / "Database" / "Procedures" / "usp_PlaceOrder.sql").read_text()
    out = classifiers.compact(text, "sql")
    assert "CREATE OR ALTER PROCEDURE [dbo].[usp_PlaceOrder]" in out
    assert "-- writes: dbo.Orders, dbo.OrderLines, dbo.Inventory" in out
    assert "-- shape: TRANSACTION + TRY/CATCH" in out and "body elided" in out
    table = classifiers.compact((SAMPLE / "Database" / "Tables" / "Orders.sql").read_text(), "sql")
    assert "CustomerId INT NOT NULL REFERENCES dbo.Customers" in table
    assert "Id INT NOT NULL PRIMARY KEY" in table


def test_csharp_skeleton_and_budget_keeps_public_api_first():
    text = (SAMPLE / "src" / "Eshop.Core" / "Services" / "PaymentService.cs").read_text()
    out = classifiers.compact(text, "dotnet")
    assert (
        "public async Task<int> CaptureAsync(int orderId, decimal amount, string provider) {" in out
    )
    assert "/// Captures the amount with the provider; retries up to three times." in out
    assert "body elided" in out and "for (var attempt" not in out
    svc = (SAMPLE / "src" / "Eshop.Core" / "Services" / "OrderService.cs").read_text()
    small = classifiers.compact(svc, "dotnet", budget_tokens=120)
    assert get_counter().count(small) <= 120
    assert "elided" in small and "class OrderService" in small


def test_unknown_language_is_unchanged_or_truncated_with_a_marker():
    prose = "word " * 400
    assert classifiers.compact(prose, "unknown") == prose
    cut = classifiers.compact(prose, "unknown", budget_tokens=50)
    assert get_counter().count(cut) <= 50 and "truncated" in cut
