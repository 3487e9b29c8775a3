"""Classification, extraction, resolution and compaction on the tests/data/code fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

import classifiers

CODE = Path(__file__).resolve().parent.parent / "data" / "code"
KINDS = {
    "src/FundsTransferService.cs": "DOTNET",
    "src/AccountRepository.cs": "DOTNET_WITH_SQL",
    "src/StatementQueries.cs": "DOTNET_WITH_SQL",
    "src/LedgerDbContext.cs": "DOTNET_WITH_SQL",
    "src/20240611093000_AddJournalArchive.cs": "DOTNET_WITH_SQL",
    "db/usp_TransferFunds.sql": "SQL",
    "db/Ledger.Tables.sql": "SQL",
    "db/Ledger.Objects.sql": "SQL",
    "other/appsettings.json": "UNKNOWN",
    "other/Ledger.Api.csproj": "UNKNOWN",
    "other/pipeline.yaml": "UNKNOWN",
    "other/README.md": "UNKNOWN",
    "other/migrate.py": "UNKNOWN",
    "other/accounts.js": "UNKNOWN",
}


def _read(rel: str) -> str:
    return (CODE / rel).read_text()


def _all() -> list[classifiers.Extraction]:
    return [classifiers.extract(_read(rel), rel) for rel in KINDS]


@pytest.mark.parametrize("rel,kind", sorted(KINDS.items()))
@pytest.mark.parametrize("with_path", [True, False])
def test_kind_with_and_without_path(rel, kind, with_path):
    c = classifiers.classify(_read(rel), rel if with_path else None)
    assert c.kind == kind
    assert 0.5 <= c.confidence <= 1 and c.reasons


def test_every_fixture_is_listed():
    assert sorted(str(p.relative_to(CODE)) for p in CODE.rglob("*") if p.is_file()) == sorted(KINDS)


def test_procedure_with_try_catch_and_transaction():
    ex = classifiers.extract(_read("db/usp_TransferFunds.sql"))
    [proc] = ex.symbols
    assert (proc.kind, proc.qualified_name) == ("procedure", "dbo.usp_TransferFunds")
    m = proc.metadata
    assert m["transaction"] and m["try_catch"]
    assert m["reads"] == ["dbo.Accounts"]  # 3-part name; the CTE, @Moves and #Audit are not objects
    assert m["writes"] == ["dbo.Accounts", "dbo.JournalLines"]
    assert m["executes"] == ["dbo.usp_LogError"]  # the THROW message text is not SQL
    assert [p["name"] for p in m["parameters"]] == [
        "@FromAccountId",
        "@ToAccountId",
        "@Amount",
        "@JournalId",
    ]
    assert m["parameters"][-1]["output"]


def test_tables_keys_alter_table_index_sequence_type():
    ex = classifiers.extract(_read("db/Ledger.Tables.sql"))
    kinds = [(s.kind, s.qualified_name) for s in ex.symbols]
    assert kinds == [
        ("table", "dbo.Accounts"),
        ("table", "dbo.JournalLines"),
        ("index", "dbo.JournalLines.IX_JournalLines_Account"),
        ("sequence", "dbo.JournalNumbers"),
        ("type", "dbo.AccountIdList"),
    ]  # ALTER TABLE adds a key, not an object
    accounts = ex.symbols[0].metadata
    assert accounts["primary_key"] == ["Id"]
    assert [c["name"] for c in accounts["columns"]] == [
        "Id",
        "Currency",
        "Balance",
        "Frozen",
        "OwnerId",
    ]
    assert accounts["foreign_keys"] == [{"columns": ["OwnerId"], "references": "dbo.Owners"}]
    edges = {(d.from_qualified_name, d.edge_type, d.to_name) for d in ex.dependencies}
    assert ("dbo.JournalLines", "FK", "dbo.Accounts") in edges
    assert ("dbo.Accounts", "FK", "dbo.Owners") in edges
    assert ("dbo.JournalLines.IX_JournalLines_Account", "On", "dbo.JournalLines") in edges


def test_view_function_trigger_and_lowercase_proc():
    ex = classifiers.extract(_read("db/Ledger.Objects.sql"))
    assert [(s.kind, s.qualified_name) for s in ex.symbols] == [
        ("view", "dbo.vw_AccountBalances"),
        ("function", "dbo.fn_AccountBalance"),
        ("trigger", "dbo.trg_JournalLines_Balance"),
        ("procedure", "dbo.usp_LogError"),
    ]
    edges = {(d.from_qualified_name, d.edge_type, d.to_name) for d in ex.dependencies}
    assert ("dbo.trg_JournalLines_Balance", "On", "dbo.JournalLines") in edges
    assert ("dbo.trg_JournalLines_Balance", "WritesTo", "dbo.Accounts") in edges
    assert ("dbo.usp_LogError", "WritesTo", "dbo.ErrorLog") in edges


def test_csharp_symbols_and_edges():
    ex = classifiers.extract(_read("src/FundsTransferService.cs"))
    by = {s.qualified_name: s for s in ex.symbols}
    svc = by["Ledger.Core.Services.FundsTransferService"]
    assert svc.doc.startswith("Moves money between accounts")
    assert by["Ledger.Core.Services.JournalEntry"].kind == "record"
    assert by["Ledger.Core.Services.TransferStatus"].kind == "enum"
    edges = {
        (d.from_qualified_name.split(".")[-1], d.edge_type, d.to_name) for d in ex.dependencies
    }
    assert ("FundsTransferService", "Inherits", "ServiceBase") in edges
    assert ("FundsTransferService", "Implements", "IFundsTransferService") in edges
    assert ("ctor", "Injects", "IAccountRepository") in edges
    assert ("TransferAsync", "Creates", "JournalEntry") in edges
    assert ("TransferAsync", "Calls", "WriteAsync") in edges
    assert not any(to == "nameof" for _, _, to in edges)


@pytest.mark.parametrize(
    "rel,member,objects",
    [
        ("src/AccountRepository.cs", "GetAsync", {"dbo.Accounts"}),
        ("src/AccountRepository.cs", "TransferAsync", {"dbo.usp_TransferFunds"}),
        ("src/StatementQueries.cs", "LinesAsync", {"dbo.JournalLines", "dbo.Accounts"}),
        ("src/StatementQueries.cs", "ArchiveAsync", {"dbo.JournalLines"}),
        ("src/LedgerDbContext.cs", "Overdrawn", {"dbo.Accounts"}),
        ("src/LedgerDbContext.cs", "Freeze", {"dbo.Accounts"}),
        (
            "src/20240611093000_AddJournalArchive.cs",
            "Up",
            {"dbo.JournalArchive", "dbo.JournalLines"},
        ),
    ],
)
def test_embedded_sql_edges(rel, member, objects):
    ex = classifiers.extract(_read(rel))
    found = {
        d.to_name
        for d in ex.dependencies
        if d.edge_type == "UsesSql" and d.from_qualified_name.endswith(f".{member}")
    }
    assert found == objects


def test_resolution_across_csharp_and_sql():
    edges = {(e.from_qn, e.to_qn, e.edge_type) for e in classifiers.resolve(_all())}
    assert (
        "Ledger.Infrastructure.Data.AccountRepository.TransferAsync",
        "dbo.usp_TransferFunds",
        "UsesSql",
    ) in edges
    assert ("dbo.usp_TransferFunds", "dbo.usp_LogError", "Executes") in edges
    assert ("dbo.JournalLines", "dbo.Accounts", "FK") in edges
    assert (
        "Ledger.Core.Services.FundsTransferService",
        "Ledger.Core.Services.IFundsTransferService",
        "Implements",
    ) in edges
    assert all(e.to_qn != "dbo.Owners" for (e,) in [(x,) for x in classifiers.resolve(_all())])


# Per code fixture: how many bodies its compaction elides (methods and constructors with a
# body; procedures, views, functions and triggers), and its other elision notes.
ELISIONS = {
    "src/FundsTransferService.cs": (3, ["// 5 using directive(s) elided", "// 3 field(s) elided"]),
    "src/AccountRepository.cs": (3, ["// 6 using directive(s) elided", "// 1 field(s) elided"]),
    "src/StatementQueries.cs": (4, ["// 4 using directive(s) elided", "// 2 field(s) elided"]),
    "src/LedgerDbContext.cs": (4, ["// 2 using directive(s) elided"]),
    "src/20240611093000_AddJournalArchive.cs": (2, ["// 1 using directive(s) elided"]),
    "db/usp_TransferFunds.sql": (1, []),
    "db/Ledger.Tables.sql": (0, ["constraints and defaults elided"] * 2),
    "db/Ledger.Objects.sql": (4, []),
}


def test_every_code_fixture_has_its_elisions_listed():
    assert sorted(ELISIONS) == sorted(r for r in KINDS if not r.startswith("other/"))


@pytest.mark.parametrize("rel", sorted(ELISIONS))
def test_compact_is_shorter_and_states_elisions(rel):
    from runtime.context.tokens import get_counter

    text, counter = _read(rel), get_counter()
    lang = classifiers.classify(text, rel).language
    out = classifiers.compact(text, lang, counter=counter)
    # Compaction happened: strictly fewer tokens, and every elision is stated.
    assert counter.count(out) < counter.count(text)
    bodies, notes = ELISIONS[rel]
    assert out.count("body elided") == bodies
    for note in set(notes):
        assert out.count(note) == notes.count(note)
    # What it keeps: every declared object, type and member is still named.
    for sym in classifiers.extract(text, rel).symbols:
        assert sym.qualified_name.removesuffix(".ctor").split(".")[-1] in out
    assert classifiers.compact(text, lang, counter=counter) == out  # deterministic


def test_csharp_skeleton_keeps_interface_enum_and_states_fields():
    out = classifiers.compact(_read("src/FundsTransferService.cs"), "dotnet")
    assert "public enum TransferStatus { Pending, Booked, Rejected }" in out
    assert "CancellationToken ct = default);\n}" in out  # interface member: no body marker
    assert "// 3 field(s) elided" in out
    assert "{ /* body elided: 14 line(s) */ }" in out


def test_csharp_budget_keeps_public_methods_first():
    from runtime.context.tokens import get_counter

    counter = get_counter()
    out = classifiers.compact(_read("src/FundsTransferService.cs"), "dotnet", 200, counter)
    assert counter.count(out) <= 200
    assert "TransferAsync(int fromId" in out and "IsSameCurrency" not in out
    assert "member(s) elided to fit the budget" in out
