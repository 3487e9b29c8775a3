"""C# extraction and resolution across the sample codebase."""

from __future__ import annotations

from pathlib import Path

import classifiers

SAMPLE = Path(__file__).resolve().parent.parent.parent / "pipelines" / "sample" / "eshop"


def _extract(name: str) -> classifiers.Extraction:
    [path] = list(SAMPLE.rglob(name))
    return classifiers.extract(path.read_text(), str(path))


def test_types_members_docs_and_lines():
    ex = _extract("OrderService.cs")
    by = {s.qualified_name: s for s in ex.symbols}
    svc = by["Eshop.Core.Services.OrderService"]
    assert svc.kind == "class" and svc.doc == "Places and cancels orders."
    assert svc.start_line == 8 and svc.end_line > 50
    place = by["Eshop.Core.Services.OrderService.PlaceOrderAsync"]
    assert (
        place.kind == "method"
        and place.signature == "public async Task<int> PlaceOrderAsync(int customerId)"
    )
    assert place.doc.startswith("Turns the customer's basket into an order")
    assert by["Eshop.Core.Services.IOrderService"].kind == "interface"
    assert by["Eshop.Core.Services.OrderService.OrderService.ctor"].kind == "constructor"
    assert by["Eshop.Core.Services"].kind == "namespace"


def test_dependencies_injects_calls_creates_implements():
    deps = {
        (d.from_qualified_name.split(".")[-1], d.edge_type, d.to_name)
        for d in _extract("OrderService.cs").dependencies
    }
    assert ("ctor", "Injects", "IOrderRepository") in deps
    assert ("ctor", "Injects", "InventoryService") in deps
    assert ("OrderService", "Implements", "IOrderService") in deps
    assert ("PlaceOrderAsync", "Calls", "ReserveAsync") in deps
    assert ("PlaceOrderAsync", "Creates", "OutOfStockException") in deps


def test_records_enums_properties_and_block_namespaces():
    ex = classifiers.extract(
        "namespace A.B {\n public record R(int X);\n public enum E { One }\n"
        " public class C { public int P { get; set; } }\n}\n"
    )
    kinds = {s.qualified_name: s.kind for s in ex.symbols}
    assert kinds == {
        "A.B": "namespace",
        "A.B.R": "record",
        "A.B.E": "enum",
        "A.B.C": "class",
        "A.B.C.P": "property",
    }


def test_embedded_sql_edges_resolve_to_sql_objects():
    exs = [
        classifiers.extract(p.read_text(), str(p))
        for p in sorted(SAMPLE.rglob("*"))
        if p.suffix in (".cs", ".sql")
    ]
    edges = {(e.from_qn, e.edge_type, e.to_qn) for e in classifiers.resolve(exs)}
    repo = "Eshop.Infrastructure.Repositories."
    assert (repo + "OrderRepository.PlaceOrderAsync", "UsesSql", "dbo.usp_PlaceOrder") in edges
    assert (
        repo + "OrderRepository.GetByIdAsync",
        "UsesSql",
        "dbo.OrderLines",
    ) in edges  # const string
    assert (
        repo + "BasketRepository.GetForCustomerAsync",
        "UsesSql",
        "dbo.BasketItems",
    ) in edges  # "a" + "b"
    assert (
        repo + "InventoryRepository.GetAvailableAsync",
        "UsesSql",
        "dbo.fn_AvailableStock",
    ) in edges
    assert (
        repo + "OrderRepository",
        "Implements",
        "Eshop.Core.Interfaces.IOrderRepository",
    ) in edges
    assert ("dbo.usp_PlaceOrder", "WritesTo", "dbo.OrderLines") in edges
    assert ("dbo.Orders", "FK", "dbo.Customers") in edges
    calls = {t for f, e, t in edges if f.endswith("OrderService.PlaceOrderAsync") and e == "Calls"}
    assert "Eshop.Core.Services.InventoryService.ReserveAsync" in calls


def test_every_overload_is_its_own_symbol():
    """A third overload used to get the second's name (M#2 twice), so one node was lost."""
    text = (
        "namespace N;\npublic class A\n{\n    public void M() {}\n    public void M(int a) {}\n"
        "    public void M(string s) {}\n    public A() {}\n    public A(int x) {}\n}\n"
    )
    names = [s.qualified_name for s in classifiers.extract(text, "A.cs").symbols]
    assert names == ["N", "N.A", "N.A.M", "N.A.M#2", "N.A.M#3", "N.A.A.ctor", "N.A.A.ctor#2"]


def test_a_name_defined_in_several_files_is_one_candidate():
    """A table in two scripts and a class in three partial files are not ambiguities."""
    tables = [
        classifiers.extract("CREATE TABLE sales.Orders (Id INT);\n", f"{folder}/Orders.sql")
        for folder in ("Tables", "Migrations")
    ]
    proc = classifiers.extract("CREATE PROCEDURE dbo.usp_Touch AS UPDATE Orders SET Id = 1;\n")
    parts = [
        classifiers.extract(
            f"namespace Shop;\npublic partial class Ledger {{ void P{i}() {{ }} }}\n"
        )
        for i in range(3)
    ]
    other = classifiers.extract("namespace Audit;\npublic class Ledger { }\n")
    user = classifiers.extract(
        "using Shop;\nusing Audit;\nnamespace App;\npublic class Book { private Ledger _l; }\n"
    )
    edges = {
        (e.from_qn, e.edge_type, e.to_qn)
        for e in classifiers.resolve([*tables, proc, *parts, other, user])
    }
    # `Orders` is read as dbo.Orders; no such table, so the bare name: one table, two files.
    assert ("dbo.usp_Touch", "WritesTo", "sales.Orders") in edges
    # Both Ledgers are in scope: each is a candidate once (the partial parts were three).
    assert {e for e in edges if e[0] == "App.Book"} == {
        ("App.Book", "References", "Shop.Ledger"),
        ("App.Book", "References", "Audit.Ledger"),
    }
