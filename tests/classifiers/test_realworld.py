"""Classification, extraction and compaction on samples of real codebases (tests/data/realworld).

The samples are unmodified files (one excerpt) of three SQL Server database projects
(Wide World Importers, AdventureWorks, tSQLt) and three ASP.NET solutions (eShop,
eShopOnWeb, Clean Architecture); benchmarks/realworld.py measures the full codebases.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import classifiers
from classifiers.code_classifier import language_only

ROOT = Path(__file__).resolve().parent.parent.parent
REAL = ROOT / "tests" / "data" / "realworld"
sys.path.insert(0, str(ROOT / "benchmarks"))
import realworld  # noqa: E402  (the benchmark's checks, written apart from the extractor)

FILES = sorted(p for p in REAL.rglob("*") if p.suffix in (".sql", ".cs"))
WWI = "wwi/wwi-ssdt/wwi-ssdt"


def _read(rel: str) -> str:
    return (REAL / rel).read_text(encoding="utf-8-sig")


def _extract(rel: str) -> classifiers.Extraction:
    return classifiers.extract(_read(rel), rel)


def _outline(ex: classifiers.Extraction) -> list[tuple[str, str]]:
    return [(s.kind, s.qualified_name) for s in ex.symbols]


def _edges(ex: classifiers.Extraction) -> list[tuple[str, str, str]]:
    return [(d.from_qualified_name, d.edge_type, d.to_name) for d in ex.dependencies]


def test_every_corpus_has_its_licence_and_source():
    corpora = sorted(p.name for p in REAL.iterdir() if p.is_dir())
    assert corpora == ["aw", "cleanarch", "eshop", "eshoponweb", "tsqlt", "wwi"]
    for name in corpora:
        assert (REAL / name / "LICENSE").stat().st_size > 500
        readme = (REAL / name / "README.md").read_text()
        assert "https://github.com/" in readme and "commit" in readme
    assert len(FILES) == 47


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REAL)))
def test_every_sample_is_classified_by_its_content(path):
    """100% on the samples: from the text alone, with the path, and by the indexer's rule."""
    text = path.read_text(encoding="utf-8-sig")
    want = "sql" if path.suffix == ".sql" else "dotnet"
    rel = str(path.relative_to(REAL))
    assert classifiers.classify(text).language == want
    assert classifiers.classify(text, rel).language == want
    assert language_only(text) == language_only(text, rel) == want


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REAL)))
def test_compaction_keeps_every_column_parameter_and_public_member(path):
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix == ".sql":
        out = classifiers.compact(text, "sql")
        assert realworld.sql_lost(text, out) == []
    else:
        out = classifiers.compact(text, "dotnet")
        assert realworld.cs_lost(text, out) == []


def test_the_checks_count_what_the_samples_hold():
    """The compaction checks are not vacuous: they find every column, parameter and member."""
    sql = [e for p in FILES if p.suffix == ".sql" for e in realworld.sql_expectations(_read_p(p))]
    cs = [e for p in FILES if p.suffix == ".cs" for e in realworld.cs_expectations(_read_p(p))]
    assert (sum(e[0] == "column" for e in sql), sum(e[0] == "parameter" for e in sql)) == (90, 13)
    assert len(cs) == 67


def _read_p(path: Path) -> str:
    return path.read_text(encoding="utf-8-sig")


# --- T-SQL: every object kind of a database project, with its edges --------------------


def test_procedure_with_parameters_right_after_its_name():
    ex = _extract(f"{WWI}/WebApi/Stored Procedures/DeleteCity.sql")
    [proc] = ex.symbols
    assert (proc.kind, proc.qualified_name) == ("procedure", "WebApi.DeleteCity")
    assert proc.signature == (
        "CREATE PROCEDURE [WebApi].[DeleteCity](@CityID int) WITH EXECUTE AS OWNER"
    )
    assert proc.metadata["parameters"] == [{"name": "@CityID", "type": "INT", "output": False}]
    assert _edges(ex) == [("WebApi.DeleteCity", "WritesTo", "Application.Cities")]


def test_temporal_table_with_geography_sequence_default_and_described_columns():
    ex = _extract(f"{WWI}/Application/Tables/Cities.sql")
    table = ex.symbols[0]
    assert table.doc.startswith("Cities that are part of any address")
    assert [(c["name"], c["type"], c.get("generated")) for c in table.metadata["columns"]] == [
        ("CityID", "INT", None),
        ("CityName", "NVARCHAR(50)", None),
        ("StateProvinceID", "INT", None),
        ("Location", "GEOGRAPHY", None),
        ("LatestRecordedPopulation", "BIGINT", None),
        ("LastEditedBy", "INT", None),
        ("ValidFrom", "DATETIME2(7)", "ROW START"),
        ("ValidTo", "DATETIME2(7)", "ROW END"),
    ]
    assert (
        table.metadata["columns"][0]["description"]
        == "Numeric ID used for reference to a city within the database"
    )
    assert _edges(ex) == [
        ("Application.Cities", "FK", "Application.People"),
        ("Application.Cities", "FK", "Application.StateProvinces"),
        ("Application.Cities", "Uses", "Sequences.CityID"),  # DEFAULT (NEXT VALUE FOR ...)
        ("Application.Cities", "History", "Application.Cities_Archive"),
        ("Application.Cities.FK_Application_Cities_StateProvinceID", "On", "Application.Cities"),
    ]


def test_table_valued_parameters_and_next_value_for():
    ex = _extract(f"{WWI}/Website/Stored Procedures/InsertCustomerOrders.sql")
    uses = [e for e in _edges(ex) if e[1] == "Uses"]
    assert uses == [
        ("Website.InsertCustomerOrders", "Uses", "Website.OrderList"),
        ("Website.InsertCustomerOrders", "Uses", "Website.OrderLineList"),
        ("Website.InsertCustomerOrders", "Uses", "Sequences.OrderID"),
    ]
    types = _extract(f"{WWI}/Website/User Defined Types/OrderLineList.sql")
    [tvp] = types.symbols
    assert (tvp.kind, tvp.metadata["table_type"]) == ("type", True)
    assert [c["name"] for c in tvp.metadata["columns"]] == [
        "OrderReference",
        "StockItemID",
        "Description",
        "Quantity",
    ]


def test_functions_scalar_inline_and_multi_statement():
    inline = _extract(f"{WWI}/Application/Functions/DetermineCustomerAccess.sql").symbols[0]
    scalar = _extract(f"{WWI}/Website/Functions/CalculateCustomerPrice.sql").symbols[0]
    aw = _extract("aw/oltp-install-script/instawdb-excerpt.sql")
    multi = next(s for s in aw.symbols if s.name == "ufnGetContactInformation")
    assert [
        (s.metadata["function_type"], s.metadata["returns"]) for s in (inline, scalar, multi)
    ] == [
        ("inline", "TABLE"),
        ("scalar", "DECIMAL(18,2)"),
        ("multi_statement", "TABLE"),
    ]
    assert [p["name"] for p in multi.metadata["parameters"]] == ["@PersonID"]  # not @ret...


def test_schema_role_sequence_and_security_policy():
    assert _outline(_extract(f"{WWI}/Security/Application.sql")) == [
        ("schema", "SCHEMA::Application")
    ]
    assert (
        _extract(f"{WWI}/Security/Application.sql")
        .symbols[0]
        .doc.startswith("Tables common across the application")
    )
    assert _outline(_extract(f"{WWI}/Security/Far West Sales.sql")) == [
        ("role", "ROLE::Far West Sales")
    ]
    assert _outline(_extract(f"{WWI}/Sequences/Sequences/CityID.sql")) == [
        ("sequence", "Sequences.CityID")
    ]
    policy = _extract(f"{WWI}/Security/FilterCustomersBySalesTerritoryRole.sql")
    assert _outline(policy) == [
        ("security_policy", "Application.FilterCustomersBySalesTerritoryRole")
    ]
    assert _edges(policy) == [
        (
            "Application.FilterCustomersBySalesTerritoryRole",
            "Executes",
            "Application.DetermineCustomerAccess",
        ),
        ("Application.FilterCustomersBySalesTerritoryRole", "On", "Sales.Customers"),
    ]


def test_logins_users_and_grants_link_principals_to_objects():
    ex = _extract(f"{WWI}/Security/Permissions.sql")
    assert _outline(ex) == [
        ("login", "LOGIN::WebApi"),
        ("user", "USER::WebApi"),
        ("permission", "GRANT CONNECT TO WebApi"),
        ("permission", "GRANT EXECUTE ON SCHEMA::WebApi TO WebApi"),
        ("permission", "GRANT SELECT ON SCHEMA::WebApi TO WebApi"),
        ("permission", "GRANT INSERT ON Application.Logs TO WebApi"),
        ("permission", "GRANT SELECT ON Application.Logs TO WebApi"),
    ]
    grant = "GRANT INSERT ON Application.Logs TO WebApi"
    # The grantee may be a user or a role: an edge to each, only the one defined resolves.
    assert [e for e in _edges(ex) if e[0] == grant] == [
        (grant, "On", "Application.Logs"),
        (grant, "Principal", "USER::WebApi"),
        (grant, "Principal", "ROLE::WebApi"),
    ]
    resolved = {(e.from_qn, e.edge_type, e.to_qn) for e in classifiers.resolve([ex])}
    assert (grant, "Principal", "USER::WebApi") in resolved
    assert (grant, "Principal", "ROLE::WebApi") not in resolved
    assert ("USER::WebApi", "Login", "LOGIN::WebApi") in resolved


def test_role_membership():
    ex = _extract("tsqlt/Build/SQL/Add(tSQLt.Built)ToExampleDB.sql")
    member = "ALTER ROLE db_owner ADD MEMBER tSQLt.Build"
    assert _outline(ex) == [("user", "USER::tSQLt.Build"), ("membership", member)]
    assert _edges(ex) == [
        ("USER::tSQLt.Build", "Login", "LOGIN::tSQLt.Build"),
        (member, "MemberOf", "ROLE::db_owner"),
        (member, "Principal", "USER::tSQLt.Build"),
        (member, "Principal", "ROLE::tSQLt.Build"),
    ]


def test_partitions_filegroups_and_sqlcmd_variables_resolve_across_files():
    rels = [
        f"{WWI}/Storage/PF_TransactionDate.sql",
        f"{WWI}/Storage/PS_TransactionDate.sql",
        f"{WWI}/Storage/USERDATA.sql",
        "wwi/wwi-dw-ssdt/wwi-dw-ssdt/Fact/Tables/Sale.sql",
    ]
    exs = [_extract(r) for r in rels]
    assert [_outline(ex)[0] for ex in exs[:3]] == [
        ("partition_function", "PARTITION FUNCTION::PF_TransactionDate"),
        ("partition_scheme", "PARTITION SCHEME::PS_TransactionDate"),
        ("filegroup", "FILEGROUP::USERDATA"),
    ]
    assert exs[2].symbols[0].metadata["sqlcmd_variables"] == ["DatabaseName"]
    resolved = {(e.from_qn, e.edge_type, e.to_qn) for e in classifiers.resolve(exs)}
    scheme = "PARTITION SCHEME::PS_TransactionDate"
    assert (scheme, "Uses", "PARTITION FUNCTION::PF_TransactionDate") in resolved
    assert (scheme, "StoredOn", "FILEGROUP::USERDATA") in resolved
    assert ("Fact.Sale", "StoredOn", "PARTITION SCHEME::PS_Date") in _edges(exs[3])


def test_adventureworks_types_schemas_xml_collections_and_triggers():
    ex = _extract("aw/oltp-install-script/instawdb-excerpt.sql")
    kinds: dict[str, int] = {}
    for s in ex.symbols:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    assert kinds == {
        "sqlcmd_variable": 2,
        "table": 6,
        "trigger": 2,
        "type": 6,
        "function": 2,
        "schema": 5,
        "xml_schema_collection": 1,
    }
    by = {s.qualified_name: s for s in ex.symbols}
    assert by["dbo.Name"].metadata == {"base_type": "NVARCHAR(50)", "nullable": True}
    assert by["$(DatabaseName)"].metadata == {"value": "AdventureWorks"}
    person = by["Person.Person"]
    assert [c["type"] for c in person.metadata["columns"]][2:5] == [
        "dbo.NameStyle",
        "NVARCHAR(8)",
        "dbo.Name",
    ]
    order = by["Sales.SalesOrderHeader"]
    number = next(c for c in order.metadata["columns"] if c["name"] == "SalesOrderNumber")
    assert number["computed"].startswith("ISNULL(N'SO'")
    edges = _edges(ex)
    assert ("Person.Person", "Uses", "dbo.Name") in edges
    assert ("Person.Person", "Uses", "Person.AdditionalContactInfoSchemaCollection") in edges
    assert ("Person.iuPerson", "On", "Person.Person") in edges  # the trigger belongs to it
    # The database DDL trigger is on no table; an xml value's methods are no objects.
    assert [e for e in edges if e[0] == "dbo.ddlDatabaseTriggerLog"] == [
        ("dbo.ddlDatabaseTriggerLog", "WritesTo", "dbo.DatabaseLog")
    ]


def test_synonym_points_at_its_target():
    # No sampled project defines a synonym outside a test body: written here.
    ex = classifiers.extract(
        "CREATE SYNONYM [Reporting].[Customers] FOR [WWI].[Sales].[Customers];\nGO\n", "s.sql"
    )
    assert _outline(ex) == [("synonym", "Reporting.Customers")]
    assert _edges(ex) == [("Reporting.Customers", "Aliases", "Sales.Customers")]


def test_post_deployment_and_seed_scripts_are_script_nodes():
    seed = _extract(f"{WWI}/PostDeploymentScripts/pds130-ins-app-paymentmethods.sql")
    qn = f"SCRIPT::{WWI}/PostDeploymentScripts/pds130-ins-app-paymentmethods.sql"
    assert _outline(seed) == [("script", qn)]
    assert _edges(seed) == [(qn, "WritesTo", "Application.PaymentMethods")]
    printed = _extract(f"{WWI}/PostDeploymentScripts/pds150-ins-app-cities-q.sql")
    assert printed.symbols[0].signature == "PRINT 'Inserting Application.Cities Q'"
    deploy = _extract(
        "wwi/wwi-dw-ssdt/wwi-dw-ssdt/PostDeploymentScripts/Script.PostDeployment1.sql"
    )
    [script] = deploy.symbols
    assert "MERGE" in script.metadata["operations"]
    assert script.metadata["writes"][0] == "Integration.ETL Cutoff"
    assert script.metadata["executes"] == ["Integration.PopulateDateDimensionForYear"]
    assert "sqlcmd_variables" not in script.metadata  # `$(TableName)` is in a comment


def test_tsqlt_test_classes_and_what_tests_exercise():
    ex = _extract("tsqlt/Tests/StubRecordTests.class.sql")
    test = "StubRecordTests.test StubRecord is deployed"
    assert _outline(ex) == [("schema", "SCHEMA::StubRecordTests"), ("procedure", test)]
    assert ex.symbols[0].metadata == {"test_class": True}
    assert ex.symbols[1].metadata["test"] is True
    assert _edges(ex) == [
        (test, "Executes", "tSQLt.AssertObjectExists"),
        (test, "Tests", "tSQLt.StubRecord"),
    ]
    apply = _extract("tsqlt/Tests/ApplyTriggerTests.class.sql")
    # CREATE TABLE inside a test's body is the test's work, not an object of the project.
    assert {s.kind for s in apply.symbols} == {"schema", "procedure"}


# --- C#: current language forms ---------------------------------------------------------


def test_top_level_statements_and_global_usings():
    program = _extract("eshop/src/Catalog.API/Program.cs")
    assert _outline(program) == [("program", "Program.Main")]
    assert ("Program.Main", "Calls", "MapCatalogApi") in _edges(program)
    usings = _extract("eshop/src/Ordering.API/GlobalUsings.cs")
    assert usings.kind == "DOTNET" and usings.usings[:3] == [
        "Asp.Versioning.Conventions",
        "System.Runtime.Serialization",
        "FluentValidation",
    ]
    assert _extract("eshop/src/ClientApp/GlobalSuppressions.cs").kind == "DOTNET"


def test_minimal_api_endpoint_maps():
    ex = _extract("eshop/src/Ordering.API/Apis/OrdersApi.cs")
    endpoints = [(s.name, s.metadata["handler"]) for s in ex.symbols if s.kind == "endpoint"]
    assert endpoints == [
        ("PUT /api/orders/cancel", "CancelOrderAsync"),
        ("PUT /api/orders/ship", "ShipOrderAsync"),
        ("GET /api/orders/{orderId:int}", "GetOrderAsync"),
        ("GET /api/orders", "GetOrdersByUserAsync"),
        ("GET /api/orders/cardtypes", "GetCardTypesAsync"),
        ("POST /api/orders/draft", "CreateOrderDraftAsync"),
        ("POST /api/orders", "CreateOrderAsync"),
    ]
    resolved = {(e.from_qn, e.edge_type, e.to_qn) for e in classifiers.resolve([ex])}
    assert (
        "OrdersApi.MapOrdersApiV1.GET /api/orders",
        "Calls",
        "OrdersApi.GetOrdersByUserAsync",
    ) in resolved
    wrapped = _extract("cleanarch/src/Web/Endpoints/TodoItems.cs")
    assert [s.name for s in wrapped.symbols if s.kind == "endpoint"] == [
        "POST /",
        "PUT /{id}",
        "PATCH /UpdateDetail/{id}",
        "DELETE /{id}",
    ]
    lam = _extract("eshoponweb/src/PublicApi/CatalogItemEndpoints/CatalogItemGetByIdEndpoint.cs")
    [endpoint] = [s for s in lam.symbols if s.kind == "endpoint"]
    assert endpoint.signature == "GET /api/catalog-items/{catalogItemId} -> lambda"
    assert (endpoint.qualified_name, "Calls", "HandleAsync") in _edges(lam)


def test_records_primary_constructors_and_public_constants():
    service = _extract("eshop/src/WebAppComponents/Services/CatalogService.cs")
    cls = service.symbols[1]
    assert cls.signature == "public class CatalogService(HttpClient httpClient) : ICatalogService"
    assert cls.metadata["primary_constructor"] == ["httpClient"]
    assert (cls.qualified_name, "Injects", "HttpClient") in _edges(service)
    records = _extract("eshop/src/WebAppComponents/Catalog/CatalogItem.cs")
    assert [s.name for s in records.symbols if s.kind == "record"] == [
        "CatalogItem",
        "CatalogResult",
        "CatalogBrand",
        "CatalogItemType",
    ]
    roles = _extract("cleanarch/src/Domain/Constants/Roles.cs")
    assert [(s.kind, s.signature) for s in roles.symbols][-1] == (
        "field",
        "public const string Administrator = …;",
    )


@pytest.mark.parametrize(
    "text",
    [
        # Laravel's Illuminate/Contracts/Support/Renderable.php (MIT): `namespace` and an
        # interface parse as C#, but it is PHP.
        "<?php\n\nnamespace Illuminate\\Contracts\\Support;\n\ninterface Renderable\n{\n"
        "    /**\n     * Get the evaluated contents of the object.\n     *\n"
        "     * @return string\n     */\n    public function render();\n}\n",
        # SQL in another language's double-quoted strings is that language's data.
        'import pyodbc\n\nconn = pyodbc.connect(CONN)\nrows = conn.execute("SELECT Id, Name FROM '
        'dbo.Users WHERE Id = ?", 1).fetchall()\nconn.execute("INSERT INTO dbo.AuditLog (Message)'
        ' VALUES (?)", "read")\n',
        'String sql = "SELECT TOP 10 * FROM Sales.Orders";\n'
        'stmt.executeUpdate("DELETE FROM Sales.Orders WHERE Id = 1");\n',
    ],
    ids=["php", "python", "java"],
)
def test_other_languages_holding_csharp_or_sql_shapes_stay_unknown(text):
    assert classifiers.classify(text).kind == "UNKNOWN"
    assert language_only(text) == "unknown"


# --- the offline answer cites the object that answers --------------------------------


def _block(rel: str, kind: str, qn: str, *, compact: bool = False) -> str:
    from runtime.context.blocks import format_block

    text = _read(rel)
    return format_block(
        {
            "id": f"wwi::main::{kind}::{qn}",
            "path": rel,
            "language": "sql",
            "text": classifiers.compact(text, "sql") if compact else text,
        },
        compact=compact,
    )


@pytest.mark.parametrize("compact", [False, True], ids=["full", "compact"])
def test_the_extractive_answer_cites_the_procedure_that_writes_the_table(compact):
    """Asked which procedure writes Sales.Orders, the offline responder cites the procedure
    (and says what it writes) before a README paragraph that uses every word of the
    question."""
    from runtime.context.blocks import format_block
    from runtime.models import ModelRequest, resolve_provider

    readme = format_block(
        {
            "id": "wwi::main::doc::README.md#Orders",
            "path": "README.md",
            "text": "Orders: the website writes every order to the Sales.Orders table through a "
            "stored procedure, and the orders procedure writes its lines too.",
        }
    )
    blocks = [
        readme,
        _block(f"{WWI}/Application/Tables/Cities.sql", "table", "Application.Cities"),
        _block(
            f"{WWI}/Website/Stored Procedures/InsertCustomerOrders.sql",
            "procedure",
            "Website.InsertCustomerOrders",
            compact=compact,
        ),
        _block(f"{WWI}/WebApi/Stored Procedures/DeleteCity.sql", "procedure", "WebApi.DeleteCity"),
    ]
    question = "Which procedure writes the Sales.Orders table?"
    content = f"Question: {question}\n<evidence>\n" + "\n\n".join(blocks) + "\n</evidence>"
    provider = resolve_provider(None, settings={})
    text = provider.complete(
        ModelRequest([{"role": "user", "content": content}], step_id="answer")
    ).text
    lines = text.split("\n")
    assert lines[4] == (
        "1. [wwi::main::procedure::Website.InsertCustomerOrders] "
        f"({WWI}/Website/Stored Procedures/InsertCustomerOrders.sql)"
    )
    assert lines[5] == (
        "   = procedure Website.InsertCustomerOrders writes Sales.Orders, Sales.OrderLines; "
        "reads Warehouse.StockItems; executes Website.CalculateCustomerPrice"
    )
    assert "2. [wwi::main::doc::README.md#Orders] (README.md)" in lines
    # DeleteCity writes a table, but not the one asked about: no fact line for it.
    assert not any(line.startswith("   = procedure WebApi.DeleteCity") for line in lines)
