"""The T-SQL extractor pinned on small realistic scripts, through `classifiers.extract`.

Every symbol (kind, names, lines, signature, doc), every column, key and parameter,
and every edge (ReadsFrom, WritesTo, Executes, FK, On, with its line) is asserted
exactly: a changed pattern shows up as a changed list.
"""

from __future__ import annotations

import pytest

import classifiers

TABLES = """\
-- Sales schema: customers, orders and their lines.
CREATE TABLE [sales].[Customers] (
    [Id]        INT            NOT NULL PRIMARY KEY,
    [Email]     NVARCHAR(256)  NOT NULL,
    [Region]    NVARCHAR (50)  NULL,
    CONSTRAINT [UQ_Customers_Email] UNIQUE ([Email])
);
GO
/* CREATE TABLE dbo.NotReal (Id INT) -- commented out, and not a doc: a blank line follows */

CREATE TABLE sales.Orders (
    Id          INT IDENTITY(1, 1) NOT NULL,
    CustomerId  INT NOT NULL REFERENCES [sales].[Customers] ([Id]),
    PlacedAt    DATETIME2(3) NOT NULL DEFAULT SYSUTCDATETIME(),
    Total       DECIMAL(18, 2) NULL,
    CONSTRAINT PK_Orders PRIMARY KEY CLUSTERED (Id ASC)
);
GO
CREATE TABLE sales.OrderLines (
    OrderId   INT NOT NULL,
    ProductId INT NOT NULL,
    Quantity  INT NOT NULL CHECK (Quantity > 0),
    CONSTRAINT PK_OrderLines PRIMARY KEY (OrderId, ProductId),
    CONSTRAINT FK_OrderLines_Orders FOREIGN KEY (OrderId) REFERENCES sales.Orders (Id)
);
GO
ALTER TABLE sales.OrderLines
    ADD CONSTRAINT FK_OrderLines_Products FOREIGN KEY (ProductId) REFERENCES catalog.Products (Id);
GO
CREATE UNIQUE NONCLUSTERED INDEX IX_Orders_Customer ON sales.Orders (CustomerId, PlacedAt);
GO
CREATE SEQUENCE sales.OrderNumbers AS BIGINT START WITH 1000 INCREMENT BY 1;
GO
CREATE TYPE sales.LineList AS TABLE (ProductId INT NOT NULL, Quantity INT NOT NULL);
GO
"""

PROCEDURE = """\
SET ANSI_NULLS ON;
GO
-- =============================================
-- Author:      payments team
-- Description: Settles an order: moves stock, writes the ledger, logs the event.
-- =============================================
CREATE OR ALTER PROCEDURE [sales].[usp_SettleOrder]
    @OrderId      INT,
    @Lines        [sales].[LineList] READONLY,
    @Currency     CHAR(3) = 'EUR',
    @Note         NVARCHAR(200) = NULL,
    @Attempts     AS INT = 1,
    @SettledAt    DATETIME2(3) OUTPUT,
    @LedgerId     BIGINT OUT
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @work TABLE (ProductId INT, Quantity INT);
    CREATE TABLE #shortages (ProductId INT);

    BEGIN TRY
        BEGIN TRANSACTION;

        WITH pending AS (
            SELECT l.ProductId, l.Quantity FROM @Lines AS l
        )
        INSERT INTO @work (ProductId, Quantity)
        SELECT p.ProductId, p.Quantity FROM pending AS p;

        SELECT c.Region
        FROM sales.Orders AS o
        JOIN [sales].[Customers] c ON c.Id = o.CustomerId
        WHERE o.Id = @OrderId;

        UPDATE i SET i.OnHand = i.OnHand - w.Quantity
        FROM inventory.Stock i
        JOIN @work w ON w.ProductId = i.ProductId;

        -- DELETE FROM sales.Orders  (never: orders are kept)
        DELETE FROM sales.PendingSettlements WHERE OrderId = @OrderId;
        UPDATE TOP (50) sales.SettlementQueue SET Done = 1 WHERE OrderId = @OrderId;

        MERGE INTO ledger.Entries AS t
        USING (SELECT @OrderId AS OrderId) AS s ON t.OrderId = s.OrderId
        WHEN NOT MATCHED THEN INSERT (OrderId, Amount) VALUES (s.OrderId, ledger.fn_OrderTotal(@OrderId));

        SET @LedgerId = SCOPE_IDENTITY();
        SET @SettledAt = SYSUTCDATETIME();
        EXEC usp_LogEvent @Source = 'settle', @Message = 'UPDATE sales.Fake SET x = 1';
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        DECLARE @rc INT;
        EXECUTE @rc = audit.usp_RecordFailure @OrderId;
        THROW;
    END CATCH
END
GO
"""

OBJECTS = """\
-- Lifetime value per customer, for the reporting jobs.
CREATE VIEW reporting.vw_CustomerValue
AS
SELECT c.Id, SUM(o.Total) AS Value
FROM sales.Customers AS c
LEFT JOIN sales.Orders AS o ON o.CustomerId = c.Id
GROUP BY c.Id;
GO

/* Stock that can still be promised. */
CREATE FUNCTION inventory.fn_Available (@ProductId INT, @AsOf DATE = NULL)
RETURNS INT
AS
BEGIN
    RETURN (SELECT OnHand - Reserved FROM inventory.Stock WHERE ProductId = @ProductId);
END;
GO
CREATE TRIGGER sales.trg_Orders_Audit ON sales.Orders
AFTER INSERT, UPDATE
AS
BEGIN
    INSERT INTO audit.OrderChanges (OrderId, ChangedAt)
    SELECT i.Id, SYSUTCDATETIME() FROM inserted AS i
    JOIN sales.Orders o ON o.Id = i.Id;
    EXEC audit.usp_Notify;
END;
GO
CREATE PROC dbo.usp_Purge AS
    TRUNCATE TABLE staging.Imports;
    DELETE c FROM audit.OrderChanges AS c WHERE c.ChangedAt < DATEADD(YEAR, -1, SYSUTCDATETIME());
GO
"""

ROUTINE_SHAPE = {"transaction": False, "try_catch": False}


def edges(ex):
    return [(d.from_qualified_name, d.to_name, d.edge_type, d.line) for d in ex.dependencies]


def outline(ex):
    return [
        (s.kind, s.name, s.qualified_name, s.start_line, s.end_line, s.parent) for s in ex.symbols
    ]


@pytest.fixture(scope="module")
def tables():
    return classifiers.extract(TABLES, "Database/Tables/Sales.sql")


@pytest.fixture(scope="module")
def procedure():
    return classifiers.extract(PROCEDURE, "Database/Procedures/usp_SettleOrder.sql")


@pytest.fixture(scope="module")
def objects():
    return classifiers.extract(OBJECTS, "Database/Objects.sql")


# --- tables, keys, indexes, sequences, types ------------------------------------------


def test_table_script_objects_and_lines(tables):
    assert (tables.kind, tables.language) == ("SQL", "sql")
    # The commented-out CREATE is no object; ALTER TABLE adds a key, not a table.
    assert outline(tables) == [
        ("table", "Customers", "sales.Customers", 2, 7, None),
        ("table", "Orders", "sales.Orders", 11, 17, None),
        ("table", "OrderLines", "sales.OrderLines", 19, 25, None),
        ("index", "IX_Orders_Customer", "sales.Orders.IX_Orders_Customer", 30, 30, None),
        ("sequence", "OrderNumbers", "sales.OrderNumbers", 32, 32, None),
        ("type", "LineList", "sales.LineList", 34, 34, None),
    ]
    assert [s.signature for s in tables.symbols] == [
        "CREATE TABLE [sales].[Customers] (",
        "CREATE TABLE sales.Orders (",
        "CREATE TABLE sales.OrderLines (",
        "CREATE UNIQUE NONCLUSTERED INDEX IX_Orders_Customer ON sales.Orders (CustomerId, PlacedAt);",
        "CREATE SEQUENCE sales.OrderNumbers AS BIGINT START WITH 1000 INCREMENT BY 1;",
        "CREATE TYPE sales.LineList AS TABLE (ProductId INT NOT NULL, Quantity INT NOT NULL);",
    ]
    assert [s.doc for s in tables.symbols] == [
        "Sales schema: customers, orders and their lines.",
        "",
        "",
        "",
        "",
        "",
    ]
    assert {s.language for s in tables.symbols} == {"sql"}
    assert tables.symbols[1].text == "\n".join(TABLES.splitlines()[10:17])


def test_table_columns_and_keys(tables):
    customers, orders, lines = tables.symbols[:3]
    assert customers.metadata == {
        "columns": [
            {"name": "Id", "type": "INT", "nullable": False, "pk": True},
            {"name": "Email", "type": "NVARCHAR(256)", "nullable": False},
            {"name": "Region", "type": "NVARCHAR(50)", "nullable": True},
        ],
        "primary_key": ["Id"],
        "foreign_keys": [],
    }
    assert orders.metadata == {
        "columns": [
            # A key declared by a table constraint marks its column as an inline one does.
            {"name": "Id", "type": "INT", "nullable": False, "pk": True},
            {"name": "CustomerId", "type": "INT", "nullable": False},
            {"name": "PlacedAt", "type": "DATETIME2(3)", "nullable": False},
            {"name": "Total", "type": "DECIMAL(18,2)", "nullable": True},
        ],
        "primary_key": ["Id"],
        "foreign_keys": [{"columns": ["CustomerId"], "references": "sales.Customers"}],
    }
    assert lines.metadata == {
        "columns": [
            {"name": "OrderId", "type": "INT", "nullable": False, "pk": True},
            {"name": "ProductId", "type": "INT", "nullable": False, "pk": True},
            {"name": "Quantity", "type": "INT", "nullable": False},
        ],
        "primary_key": ["OrderId", "ProductId"],
        "foreign_keys": [
            {"columns": ["OrderId"], "references": "sales.Orders"},
            {"columns": ["ProductId"], "references": "catalog.Products"},  # from ALTER TABLE
        ],
    }


def test_table_script_edges(tables):
    assert edges(tables) == [
        ("sales.Orders", "sales.Customers", "FK", 11),
        ("sales.OrderLines", "sales.Orders", "FK", 19),
        ("sales.OrderLines", "catalog.Products", "FK", 27),  # the ALTER TABLE's line
        ("sales.Orders.IX_Orders_Customer", "sales.Orders", "On", 30),
    ]


# --- a procedure: parameters, reads, writes, executes --------------------------------


def test_procedure_header(procedure):
    [proc] = procedure.symbols
    assert outline(procedure) == [
        ("procedure", "usp_SettleOrder", "sales.usp_SettleOrder", 7, 58, None)
    ]
    assert proc.doc == "Settles an order: moves stock, writes the ledger, logs the event."
    assert proc.signature == (
        "CREATE OR ALTER PROCEDURE [sales].[usp_SettleOrder] @OrderId INT, "
        "@Lines [sales].[LineList] READONLY, @Currency CHAR(3) = 'EUR', "
        "@Note NVARCHAR(200) = NULL, @Attempts AS INT = 1, @SettledAt DATETIME2(3) OUTPUT, "
        "@LedgerId BIGINT OUT"
    )
    assert proc.metadata["parameters"] == [
        {"name": "@OrderId", "type": "INT", "output": False},
        {"name": "@Lines", "type": "SALES.LINELIST", "output": False},
        {"name": "@Currency", "type": "CHAR(3)", "output": False},
        {"name": "@Note", "type": "NVARCHAR(200)", "output": False},
        {"name": "@Attempts", "type": "INT", "output": False},
        {"name": "@SettledAt", "type": "DATETIME2(3)", "output": True},
        {"name": "@LedgerId", "type": "BIGINT", "output": True},
    ]


def test_procedure_body_references(procedure):
    [proc] = procedure.symbols
    meta = {k: v for k, v in proc.metadata.items() if k != "parameters"}
    # Not objects: @work, #shortages, the CTE `pending`, names in comments and strings.
    # DELETE FROM writes its table without reading it; UPDATE i ... FROM t i writes t.
    assert meta == {
        "reads": ["sales.Orders", "sales.Customers", "inventory.Stock"],
        "writes": [
            "inventory.Stock",
            "sales.PendingSettlements",
            "sales.SettlementQueue",
            "ledger.Entries",
        ],
        "executes": ["dbo.usp_LogEvent", "audit.usp_RecordFailure", "ledger.fn_OrderTotal"],
        "operations": ["DELETE", "INSERT", "MERGE", "SELECT", "UPDATE"],
        "transaction": True,
        "try_catch": True,
    }
    qn = "sales.usp_SettleOrder"
    assert edges(procedure) == [
        (qn, "sales.LineList", "Uses", 7),  # the table-valued parameter's type
        (qn, "sales.Orders", "ReadsFrom", 7),
        (qn, "sales.Customers", "ReadsFrom", 7),
        (qn, "inventory.Stock", "ReadsFrom", 7),
        (qn, "inventory.Stock", "WritesTo", 7),
        (qn, "sales.PendingSettlements", "WritesTo", 7),
        (qn, "sales.SettlementQueue", "WritesTo", 7),
        (qn, "ledger.Entries", "WritesTo", 7),
        (qn, "dbo.usp_LogEvent", "Executes", 7),
        (qn, "audit.usp_RecordFailure", "Executes", 7),
        (qn, "ledger.fn_OrderTotal", "Executes", 7),
    ]


# --- views, functions, triggers, batches ----------------------------------------------


def test_views_functions_triggers_and_their_batches(objects):
    assert outline(objects) == [
        ("view", "vw_CustomerValue", "reporting.vw_CustomerValue", 2, 7, None),
        ("function", "fn_Available", "inventory.fn_Available", 11, 16, None),
        ("trigger", "trg_Orders_Audit", "sales.trg_Orders_Audit", 18, 26, None),
        ("procedure", "usp_Purge", "dbo.usp_Purge", 28, 30, None),
    ]
    assert [s.signature for s in objects.symbols] == [
        "CREATE VIEW reporting.vw_CustomerValue",
        "CREATE FUNCTION inventory.fn_Available (@ProductId INT, @AsOf DATE = NULL) RETURNS INT",
        "CREATE TRIGGER sales.trg_Orders_Audit ON sales.Orders AFTER INSERT, UPDATE",
        "CREATE PROC dbo.usp_Purge",
    ]
    assert [s.doc for s in objects.symbols] == [
        "Lifetime value per customer, for the reporting jobs.",
        "Stock that can still be promised.",
        "",
        "",
    ]
    view, function, trigger, purge = (s.metadata for s in objects.symbols)
    assert view == {
        "reads": ["sales.Customers", "sales.Orders"],
        "writes": [],
        "executes": [],
        "operations": ["SELECT"],
        **ROUTINE_SHAPE,
    }
    assert function == {
        "parameters": [
            {"name": "@ProductId", "type": "INT", "output": False},
            {"name": "@AsOf", "type": "DATE", "output": False},
        ],
        "function_type": "scalar",
        "returns": "INT",
        "reads": ["inventory.Stock"],
        "writes": [],
        "executes": [],
        "operations": ["SELECT"],
        **ROUTINE_SHAPE,
    }
    # `inserted` is no table; the table the trigger is on is an On edge, not a read;
    # its `AFTER INSERT, UPDATE` is when it fires, not what it does.
    assert trigger == {
        "reads": [],
        "writes": ["audit.OrderChanges"],
        "executes": ["audit.usp_Notify"],
        "operations": ["INSERT", "SELECT"],
        **ROUTINE_SHAPE,
    }
    # DELETE alias FROM table alias: the table is written, not `dbo.c`.
    assert purge == {
        "parameters": [],
        "reads": ["audit.OrderChanges"],
        "writes": ["staging.Imports", "audit.OrderChanges"],
        "executes": [],
        "operations": ["DELETE", "TRUNCATE"],
        **ROUTINE_SHAPE,
    }
    assert edges(objects) == [
        ("reporting.vw_CustomerValue", "sales.Customers", "ReadsFrom", 2),
        ("reporting.vw_CustomerValue", "sales.Orders", "ReadsFrom", 2),
        ("inventory.fn_Available", "inventory.Stock", "ReadsFrom", 11),
        ("sales.trg_Orders_Audit", "sales.Orders", "On", 18),
        ("sales.trg_Orders_Audit", "audit.OrderChanges", "WritesTo", 18),
        ("sales.trg_Orders_Audit", "audit.usp_Notify", "Executes", 18),
        ("dbo.usp_Purge", "audit.OrderChanges", "ReadsFrom", 28),
        ("dbo.usp_Purge", "staging.Imports", "WritesTo", 28),
        ("dbo.usp_Purge", "audit.OrderChanges", "WritesTo", 28),
    ]


@pytest.mark.parametrize("script", [TABLES, PROCEDURE, OBJECTS], ids=["tables", "proc", "objects"])
def test_windows_line_endings_give_the_same_extraction(script):
    """SSMS and Visual Studio save CRLF: `GO\\r` still ends a batch, docs carry no `\\r`."""
    unix = classifiers.extract(script, "x.sql")
    windows = classifiers.extract(script.replace("\n", "\r\n"), "x.sql")

    def shape(ex):
        return [
            (s.kind, s.qualified_name, s.start_line, s.end_line, s.signature, s.doc, s.metadata)
            for s in ex.symbols
        ]

    assert shape(windows) == shape(unix)
    assert edges(windows) == edges(unix)
