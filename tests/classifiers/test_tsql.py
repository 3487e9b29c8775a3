"""T-SQL scanning: batches, names, objects, references, columns and keys."""

from __future__ import annotations

from pathlib import Path

from classifiers import tsql

SAMPLE = (
    Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop" / "Database"
)


def test_go_inside_comments_and_strings_is_not_a_batch_break():
    text = "SELECT 1;\n/*\nGO\n*/\nPRINT 'x\nGO\n';\nGO\nSELECT 2\n"
    assert len(tsql.batches(text)) == 2


def test_names_are_normalized():
    assert tsql.normalize("[dbo].[Orders]") == "dbo.Orders"
    assert tsql.normalize("Orders") == "dbo.Orders"
    assert tsql.normalize("Shop.sales.[Orders]") == "sales.Orders"
    assert not tsql.is_object_name("#tmp") and not tsql.is_object_name("@t")


def test_procedure_references_exclude_temp_tables_variables_and_ctes():
    syms, deps = tsql.extract((SAMPLE / "Procedures" / "usp_PlaceOrder.sql").read_text())
    [proc] = syms
    assert (proc.kind, proc.qualified_name) == ("procedure", "dbo.usp_PlaceOrder")
    m = proc.metadata
    assert set(m["writes"]) == {"dbo.Orders", "dbo.OrderLines", "dbo.Inventory"}
    assert "dbo.Customers" in m["reads"] and "dbo.shortages" not in m["reads"]
    assert m["executes"] == ["dbo.usp_LogEvent"]
    assert m["transaction"] and m["try_catch"]
    assert [p["name"] for p in m["parameters"]] == ["@CustomerId", "@Lines", "@OrderId"]
    assert m["parameters"][2]["output"] is True
    kinds = {(d.edge_type, d.to_name) for d in deps}
    assert ("Executes", "dbo.usp_LogEvent") in kinds and ("WritesTo", "dbo.Orders") in kinds


def test_tables_columns_keys_indexes_types_and_sequences():
    syms, deps = tsql.extract((SAMPLE / "Tables" / "Orders.sql").read_text())
    by = {s.qualified_name: s for s in syms}
    orders = by["dbo.Orders"]
    assert orders.metadata["primary_key"] == ["Id"]
    assert {"columns": ["CustomerId"], "references": "dbo.Customers"} in orders.metadata[
        "foreign_keys"
    ]
    assert [c["name"] for c in orders.metadata["columns"]] == [
        "Id",
        "CustomerId",
        "Status",
        "CreatedAt",
        "Total",
    ]
    assert by["dbo.OrderLines"].metadata["primary_key"] == ["OrderId", "ProductId"]
    assert by["dbo.Orders.IX_Orders_CustomerId"].kind == "index"
    assert by["dbo.OrderLineType"].kind == "type"
    assert ("dbo.OrderLines", "dbo.Products", "FK") in {
        (d.from_qualified_name, d.to_name, d.edge_type) for d in deps
    }
    assert ("dbo.Orders.IX_Orders_CustomerId", "dbo.Orders", "On") in {
        (d.from_qualified_name, d.to_name, d.edge_type) for d in deps
    }
    catalog, _ = tsql.extract((SAMPLE / "Tables" / "Catalog.sql").read_text())
    assert "sequence" in {s.kind for s in catalog}


def test_trigger_view_function():
    [trg], deps = tsql.extract((SAMPLE / "Triggers" / "trg_Orders_Audit.sql").read_text())
    assert trg.kind == "trigger"
    assert {(d.edge_type, d.to_name) for d in deps} == {
        ("On", "dbo.Orders"),
        ("WritesTo", "dbo.OrderAudit"),
    }
    [view], vdeps = tsql.extract((SAMPLE / "Views" / "vw_CustomerLifetimeValue.sql").read_text())
    assert view.kind == "view" and {d.to_name for d in vdeps} == {"dbo.Customers", "dbo.Orders"}
    [fn], _ = tsql.extract((SAMPLE / "Functions" / "fn_AvailableStock.sql").read_text())
    assert fn.kind == "function" and fn.metadata["reads"] == ["dbo.Inventory"]


def test_temp_table_create_is_not_an_object_and_comments_hide_code():
    syms, _ = tsql.extract(
        "CREATE TABLE #work (Id INT);\n-- CREATE TABLE dbo.Fake (x int)\n"
        "CREATE TABLE dbo.Real (Id INT PRIMARY KEY);\n"
    )
    assert [s.qualified_name for s in syms] == ["dbo.Real"]


def test_the_comment_above_a_definition_is_its_doc():
    text = """-- =============================================
-- Author:      ops
-- Description: archives old orders
-- =============================================
CREATE PROCEDURE dbo.usp_Archive AS SELECT 1;
GO
/* Nightly job.
   Runs at 02:00. */
CREATE VIEW dbo.vw_Night AS SELECT 1 AS x;
GO
-- not attached: a blank line follows

CREATE TABLE dbo.T (Id INT);
GO
-- Keeps events.
CREATE TABLE dbo.Events (Id INT);
"""
    symbols, _ = tsql.extract(text)
    docs = {s.qualified_name: s.doc for s in symbols}
    assert docs == {
        "dbo.usp_Archive": "archives old orders",
        "dbo.vw_Night": "Nightly job. Runs at 02:00.",
        "dbo.T": "",
        "dbo.Events": "Keeps events.",
    }
