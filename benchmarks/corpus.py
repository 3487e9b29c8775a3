"""A generated corpus of realistic C#, T-SQL and other files, for classifier accuracy.

Deterministic for a seed. Each item is (expected language, file name, text). The
templates follow the shapes of real code: services with injected repositories,
Dapper/ADO.NET/EF data access, controllers, entities, records, migrations; tables
with constraints, procedures with TRY/CATCH and transactions, views, functions,
triggers, GO batches; and look-alikes that must not pass: Java, TypeScript,
Python, JSON, XML project files, YAML, Markdown.
"""

from __future__ import annotations

import random

NOUNS = [
    "Order",
    "Customer",
    "Invoice",
    "Shipment",
    "Product",
    "Basket",
    "Payment",
    "Supplier",
    "Warehouse",
    "Refund",
    "Coupon",
    "Review",
    "Account",
    "Ledger",
    "Employee",
    "Ticket",
]


def _cs_service(r: random.Random, n: str) -> str:
    dep = r.choice(NOUNS)
    return f"""using System;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;

namespace Contoso.{r.choice(["Core", "Domain", "Application"])}.Services
{{
    /// <summary>Handles {n.lower()} use cases.</summary>
    public sealed class {n}Service : I{n}Service
    {{
        private readonly I{n}Repository _repository;
        private readonly I{dep}Repository _{dep.lower()}s;
        private readonly ILogger<{n}Service> _logger;

        public {n}Service(I{n}Repository repository, I{dep}Repository {dep.lower()}s, ILogger<{n}Service> logger)
        {{
            _repository = repository ?? throw new ArgumentNullException(nameof(repository));
            _{dep.lower()}s = {dep.lower()}s;
            _logger = logger;
        }}

        public async Task<{n}Dto?> GetAsync(int id)
        {{
            var entity = await _repository.FindAsync(id);
            return entity is null ? null : new {n}Dto(entity.Id, entity.Name);
        }}

        public async Task<int> CreateAsync(Create{n}Request request)
        {{
            if (string.IsNullOrWhiteSpace(request.Name)) throw new ArgumentException("Name is required");
            var id = await _repository.InsertAsync(new {n} {{ Name = request.Name }});
            _logger.LogInformation("Created {{Id}}", id);
            return id;
        }}
    }}
}}
"""


def _cs_dapper(r: random.Random, n: str) -> str:
    table = f"dbo.{n}s"
    return f"""using System.Data;
using Dapper;

namespace Contoso.Infrastructure.Repositories;

public class {n}Repository : I{n}Repository
{{
    private readonly IDbConnection _db;
    public {n}Repository(IDbConnection db) => _db = db;

    public Task<{n}?> FindAsync(int id) =>
        _db.QuerySingleOrDefaultAsync<{n}>("SELECT Id, Name FROM {table} WHERE Id = @id", new {{ id }});

    public Task<int> InsertAsync({n} item) =>
        _db.ExecuteScalarAsync<int>(@"INSERT INTO {table} (Name) VALUES (@Name);
                                      SELECT CAST(SCOPE_IDENTITY() AS INT);", item);
}}
"""


def _cs_ado(r: random.Random, n: str) -> str:
    return f"""using Microsoft.Data.SqlClient;

namespace Legacy.Data
{{
    public class {n}Gateway
    {{
        private readonly string _cs;
        public {n}Gateway(string cs) {{ _cs = cs; }}

        public int Archive(int olderThanDays)
        {{
            using (var conn = new SqlConnection(_cs))
            using (var cmd = conn.CreateCommand())
            {{
                cmd.CommandText = "DELETE FROM dbo.{n}s WHERE CreatedAt < DATEADD(day, -@d, SYSUTCDATETIME())";
                cmd.Parameters.AddWithValue("@d", olderThanDays);
                conn.Open();
                return cmd.ExecuteNonQuery();
            }}
        }}
    }}
}}
"""


def _cs_entity(r: random.Random, n: str) -> str:
    props = "\n".join(
        f"    public {t} {p} {{ get; set; }}"
        for t, p in r.sample(
            [
                ("int", "Id"),
                ("string", "Name"),
                ("decimal", "Amount"),
                ("DateTime", "CreatedAt"),
                ("bool", "IsActive"),
                ("Guid", "ExternalId"),
                ("string?", "Notes"),
            ],
            5,
        )
    )
    return f"""namespace Contoso.Domain.Entities;

/// <summary>The {n.lower()} aggregate.</summary>
public class {n}
{{
{props}
}}

public record {n}Dto(int Id, string Name);
"""


def _cs_controller(r: random.Random, n: str) -> str:
    return f"""using Microsoft.AspNetCore.Mvc;

namespace Contoso.Api.Controllers;

[ApiController]
[Route("api/[controller]")]
public class {n}sController : ControllerBase
{{
    private readonly I{n}Service _service;
    public {n}sController(I{n}Service service) => _service = service;

    [HttpGet("{{id:int}}")]
    public async Task<ActionResult<{n}Dto>> Get(int id)
    {{
        var dto = await _service.GetAsync(id);
        return dto is null ? NotFound() : Ok(dto);
    }}
}}
"""


def _cs_interface(r: random.Random, n: str) -> str:
    return f"""namespace Contoso.Domain.Abstractions
{{
    public interface I{n}Repository
    {{
        Task<{n}?> FindAsync(int id);
        Task<int> InsertAsync({n} item);
    }}

    public enum {n}State {{ Draft, Active, Closed }}
}}
"""


def _cs_migration(r: random.Random, n: str) -> str:
    return f"""using Microsoft.EntityFrameworkCore.Migrations;

#nullable disable

namespace Contoso.Infrastructure.Migrations
{{
    public partial class Add{n}Index : Migration
    {{
        protected override void Up(MigrationBuilder migrationBuilder)
        {{
            migrationBuilder.Sql("CREATE INDEX IX_{n}s_Name ON dbo.{n}s (Name)");
        }}

        protected override void Down(MigrationBuilder migrationBuilder)
        {{
            migrationBuilder.Sql("DROP INDEX IX_{n}s_Name ON dbo.{n}s");
        }}
    }}
}}
"""


def _cs_worker(r: random.Random, n: str) -> str:
    return f"""using System.Threading;

internal static class {n}Extensions
{{
    internal static bool IsExpired(this {n} item, DateTime now) => item.CreatedAt.AddDays(30) < now;

    internal static IEnumerable<T> Batch<T>(this IEnumerable<T> source, int size)
    {{
        var bucket = new List<T>(size);
        foreach (var x in source)
        {{
            bucket.Add(x);
            if (bucket.Count == size) {{ yield return default!; bucket.Clear(); }}
        }}
    }}
}}
"""


def _sql_table(r: random.Random, n: str) -> str:
    return f"""CREATE TABLE [dbo].[{n}s] (
    [Id] INT IDENTITY(1,1) NOT NULL,
    [Name] NVARCHAR(200) NOT NULL,
    [CustomerId] INT NULL,
    [CreatedAt] DATETIME2(3) NOT NULL CONSTRAINT [DF_{n}s_CreatedAt] DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT [PK_{n}s] PRIMARY KEY CLUSTERED ([Id] ASC),
    CONSTRAINT [FK_{n}s_Customers] FOREIGN KEY ([CustomerId]) REFERENCES [dbo].[Customers] ([Id])
);
GO
CREATE NONCLUSTERED INDEX [IX_{n}s_CustomerId] ON [dbo].[{n}s] ([CustomerId]);
GO
"""


def _sql_proc(r: random.Random, n: str) -> str:
    other = r.choice(NOUNS)
    return f"""SET ANSI_NULLS ON
GO
SET QUOTED_IDENTIFIER ON
GO
-- =============================================
-- Description: archives old {n.lower()}s
-- =============================================
CREATE OR ALTER PROCEDURE [dbo].[usp_Archive{n}s]
    @OlderThan DATETIME2,
    @BatchSize INT = 500
AS
BEGIN
    SET NOCOUNT ON;
    BEGIN TRY
        BEGIN TRANSACTION;
        INSERT INTO dbo.{n}sArchive (Id, Name, CreatedAt)
        SELECT TOP (@BatchSize) Id, Name, CreatedAt FROM dbo.{n}s WHERE CreatedAt < @OlderThan;
        DELETE t FROM dbo.{n}s t JOIN dbo.{n}sArchive a ON a.Id = t.Id;
        UPDATE dbo.{other}s SET LastArchivedAt = SYSUTCDATETIME();
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        DECLARE @msg NVARCHAR(2048) = ERROR_MESSAGE();
        RAISERROR(@msg, 16, 1);
    END CATCH
END
GO
"""


def _sql_view(r: random.Random, n: str) -> str:
    return f"""CREATE VIEW dbo.vw_{n}Summary
WITH SCHEMABINDING
AS
SELECT x.CustomerId, COUNT_BIG(*) AS Cnt, SUM(x.Amount) AS Total
FROM dbo.{n}s AS x
GROUP BY x.CustomerId;
GO
"""


def _sql_function_trigger(r: random.Random, n: str) -> str:
    return f"""CREATE FUNCTION dbo.fn_{n}Count (@CustomerId INT)
RETURNS INT
AS
BEGIN
    RETURN (SELECT COUNT(*) FROM dbo.{n}s WHERE CustomerId = @CustomerId);
END
GO

CREATE TRIGGER dbo.trg_{n}s_Audit ON dbo.{n}s
AFTER UPDATE
AS
BEGIN
    SET NOCOUNT ON;
    INSERT INTO dbo.AuditLog (TableName, RowId, ChangedAt)
    SELECT '{n}s', i.Id, SYSUTCDATETIME() FROM inserted i;
END
GO
"""


def _sql_script(r: random.Random, n: str) -> str:
    return f"""-- Data fix for ticket #{r.randint(1000, 9999)}
DECLARE @cutoff DATETIME2 = DATEADD(MONTH, -6, SYSUTCDATETIME());

;WITH stale AS (
    SELECT Id FROM dbo.{n}s WHERE CreatedAt < @cutoff AND IsActive = 1
)
UPDATE t SET IsActive = 0
FROM dbo.{n}s t
JOIN stale s ON s.Id = t.Id;

SELECT @@ROWCOUNT AS Updated;
GO
"""


def _other(r: random.Random, n: str) -> tuple[str, str]:
    kind = r.randrange(7)
    if kind == 0:
        return (
            "x.java",
            f"""package com.contoso.{n.lower()};

import java.util.List;

public class {n}Service extends BaseService implements {n}Api {{
    private final {n}Repository repository;
    public {n}Service({n}Repository repository) {{ this.repository = repository; }}
    @Override
    public List<{n}> findAll() throws ServiceException {{ return repository.findAll(); }}
}}
""",
        )
    if kind == 1:
        return (
            "x.ts",
            f"""import {{ Injectable }} from '@angular/core';

export interface {n} {{ id: number; name: string; }}

@Injectable()
export class {n}Service {{
  constructor(private http: HttpClient) {{}}
  get(id: number): Observable<{n}> {{ return this.http.get<{n}>(`/api/{n.lower()}s/${{id}}`); }}
}}
""",
        )
    if kind == 2:
        return (
            "x.py",
            f"""from dataclasses import dataclass


@dataclass
class {n}:
    id: int
    name: str


def load_{n.lower()}s(conn) -> list[{n}]:
    rows = conn.execute("SELECT id, name FROM {n.lower()}s").fetchall()
    return [{n}(*row) for row in rows]
""",
        )
    if kind == 3:
        return (
            "appsettings.json",
            f"""{{
  "ConnectionStrings": {{ "Default": "Server=.;Database={n}Db;Trusted_Connection=True" }},
  "Logging": {{ "LogLevel": {{ "Default": "Information" }} }},
  "Features": {{ "{n}Import": true }}
}}
""",
        )
    if kind == 4:
        return (
            "x.csproj",
            f"""<Project Sdk="Microsoft.NET.Sdk.Web">
  <PropertyGroup>
    <TargetFramework>net8.0</TargetFramework>
    <RootNamespace>Contoso.{n}</RootNamespace>
  </PropertyGroup>
  <ItemGroup>
    <PackageReference Include="Dapper" Version="2.1.35" />
  </ItemGroup>
</Project>
""",
        )
    if kind == 5:
        return (
            "README.md",
            f"""# {n} module

The {n.lower()} module exposes a REST API and stores data in SQL Server.
Run `dotnet test` to execute the tests. The `{n}Service` class is the entry point;
select the connection string in `appsettings.json`.
""",
        )
    return (
        "pipeline.yml",
        f"""trigger:
  - main
pool:
  vmImage: ubuntu-latest
steps:
  - script: dotnet build {n}.sln
  - script: dotnet test
""",
    )


CS = [
    _cs_service,
    _cs_dapper,
    _cs_ado,
    _cs_entity,
    _cs_controller,
    _cs_interface,
    _cs_migration,
    _cs_worker,
]
SQL = [_sql_table, _sql_proc, _sql_view, _sql_function_trigger, _sql_script]


def corpus(n: int = 300, seed: int = 1) -> list[tuple[str, str, str]]:
    """(expected language, file name, text) items: 40% C#, 40% T-SQL, 20% other."""
    r = random.Random(seed)
    items = []
    for i in range(n):
        noun = r.choice(NOUNS) + (
            r.choice(["", "Line", "Item", "Batch"]) if r.random() < 0.3 else ""
        )
        bucket = i % 5
        if bucket < 2:
            items.append(("dotnet", f"{noun}.cs", r.choice(CS)(r, noun)))
        elif bucket < 4:
            items.append(("sql", f"{noun}.sql", r.choice(SQL)(r, noun)))
        else:
            name, text = _other(r, noun)
            items.append(("unknown", name, text))
    return items


# --- a realistic codebase: modules of full-size files, for indexing throughput ---------

_VERBS = [
    "Approve",
    "Cancel",
    "Close",
    "Reopen",
    "Archive",
    "Recalculate",
    "Assign",
    "Export",
    "Suspend",
    "Resume",
    "Merge",
    "Split",
    "Escalate",
    "Verify",
]
_COLS = [
    ("Name", "NVARCHAR(200)", "string"),
    ("Description", "NVARCHAR(MAX)", "string?"),
    ("Amount", "DECIMAL(18,2)", "decimal"),
    ("Quantity", "INT", "int"),
    ("Status", "TINYINT", "int"),
    ("CreatedAt", "DATETIME2(3)", "DateTime"),
    ("UpdatedAt", "DATETIME2(3)", "DateTime?"),
    ("IsActive", "BIT", "bool"),
    ("ExternalId", "UNIQUEIDENTIFIER", "Guid"),
    ("Notes", "NVARCHAR(1000)", "string?"),
    ("Currency", "CHAR(3)", "string"),
    ("Priority", "INT", "int"),
    ("DueDate", "DATE", "DateTime?"),
    ("Reference", "NVARCHAR(64)", "string"),
    ("Weight", "DECIMAL(9,3)", "decimal"),
    ("Region", "NVARCHAR(32)", "string"),
]


def _extra_steps(
    r: random.Random, n: str, peer: str, cols: list[tuple[str, str, str]], steps: tuple[int, int]
) -> str:
    """More statements for a procedure: checks, history, totals, as long procedures have."""
    if steps == (0, 0):
        return ""  # draws nothing: the default corpus stays the same
    out = []
    for i in range(r.randint(*steps)):
        col = cols[i % len(cols)][0]
        out.append(
            f"""
        -- step {i + 1}: keep {peer.lower()} totals and history in line
        IF EXISTS (SELECT 1 FROM dbo.{n}s WHERE Id = @Id AND {col} IS NULL)
            UPDATE dbo.{n}s SET {col} = (SELECT TOP (1) {col} FROM dbo.{n}s WHERE {peer}Id = (
                SELECT {peer}Id FROM dbo.{n}s WHERE Id = @Id) AND {col} IS NOT NULL ORDER BY UpdatedAt DESC)
             WHERE Id = @Id;
        INSERT INTO dbo.{n}Events ({n}Id, Kind, Reason, At)
        SELECT x.Id, N'Step{i + 1}', CONCAT(@Reason, N' / ', p.Id), @now
          FROM dbo.{n}s x
          JOIN dbo.{peer}s p ON p.Id = x.{peer}Id
         WHERE x.Id = @Id AND p.IsActive = 1;
        MERGE dbo.{peer}Totals AS t
        USING (SELECT {peer}Id, COUNT(*) AS Cnt FROM dbo.{n}s WHERE {peer}Id IS NOT NULL GROUP BY {peer}Id) AS s
           ON t.{peer}Id = s.{peer}Id
        WHEN MATCHED THEN UPDATE SET t.{n}Count = s.Cnt, t.UpdatedAt = @now
        WHEN NOT MATCHED THEN INSERT ({peer}Id, {n}Count, UpdatedAt) VALUES (s.{peer}Id, s.Cnt, @now);"""
        )
    return "".join(out)


def _module_files(
    r: random.Random,
    n: str,
    peers: list[str],
    members: tuple[int, int],
    steps: tuple[int, int] = (0, 0),
) -> list[tuple[str, str]]:
    """The files of one module: entity, interfaces, repository, service, controller, SQL."""
    cols = r.sample(_COLS, r.randint(8, 14))
    peer = r.choice([p for p in peers if p != n] or peers)
    verbs = r.sample(_VERBS, r.randint(*members))
    files: list[tuple[str, str]] = []
    props = "\n\n".join(
        f"    /// <summary>The {c.lower()} of the {n.lower()}.</summary>\n"
        f"    public {t} {c} {{ get; set; }}" + (" = string.Empty;" if t == "string" else "")
        for c, _, t in cols
    )
    files.append(
        (
            f"src/Domain/{n}.cs",
            f"""using System;
using System.Collections.Generic;

namespace Contoso.Domain.Entities;

/// <summary>The {n.lower()} aggregate root.</summary>
public class {n}
{{
    public int Id {{ get; set; }}

{props}

    public int {peer}Id {{ get; set; }}
    public {peer}? {peer} {{ get; set; }}
    public ICollection<{n}Event> Events {{ get; }} = new List<{n}Event>();

    public bool CanTransition(int target) => IsActive && target != Status && target >= 0;
}}

public record {n}Dto(int Id, string Name, int Status);
public record Create{n}Request(string Name, int {peer}Id);
""",
        )
    )
    iface = "\n".join(f"    Task<int> {v}Async(int id, string reason);" for v in verbs)
    files.append(
        (
            f"src/Domain/I{n}Repository.cs",
            f"""namespace Contoso.Domain.Abstractions;

public interface I{n}Repository
{{
    Task<{n}?> FindAsync(int id);
    Task<IReadOnlyList<{n}>> ListBy{peer}Async(int {peer.lower()}Id, int page, int size);
    Task<int> InsertAsync({n} item);
    Task UpdateAsync({n} item);
{iface}
}}
""",
        )
    )
    col_list = ", ".join(c for c, _, _ in cols[:6])
    repo_methods = "\n".join(
        f"""
    public async Task<int> {v}Async(int id, string reason)
    {{
        using var tx = _db.BeginTransaction();
        var affected = await _db.ExecuteAsync(
            "dbo.usp_{v}{n}",
            new {{ Id = id, Reason = reason, At = DateTime.UtcNow }},
            tx,
            commandType: CommandType.StoredProcedure);
        tx.Commit();
        _logger.LogInformation("{v} {n} {{Id}}: {{Affected}} row(s)", id, affected);
        return affected;
    }}"""
        for v in verbs
    )
    files.append(
        (
            f"src/Infrastructure/{n}Repository.cs",
            f"""using System.Data;
using Dapper;
using Microsoft.Extensions.Logging;
using Contoso.Domain.Abstractions;
using Contoso.Domain.Entities;

namespace Contoso.Infrastructure.Repositories;

public sealed class {n}Repository : I{n}Repository
{{
    private readonly IDbConnection _db;
    private readonly ILogger<{n}Repository> _logger;

    public {n}Repository(IDbConnection db, ILogger<{n}Repository> logger)
    {{
        _db = db;
        _logger = logger;
    }}

    public Task<{n}?> FindAsync(int id) =>
        _db.QuerySingleOrDefaultAsync<{n}>(
            @"SELECT Id, {col_list}
              FROM dbo.{n}s
              WHERE Id = @id", new {{ id }});

    public async Task<IReadOnlyList<{n}>> ListBy{peer}Async(int {peer.lower()}Id, int page, int size)
    {{
        var rows = await _db.QueryAsync<{n}>(
            @"SELECT x.Id, {", ".join("x." + c for c, _, _ in cols[:5])}
              FROM dbo.{n}s x
              JOIN dbo.{peer}s p ON p.Id = x.{peer}Id
              WHERE x.{peer}Id = @{peer.lower()}Id AND x.IsActive = 1
              ORDER BY x.CreatedAt DESC
              OFFSET @skip ROWS FETCH NEXT @size ROWS ONLY",
            new {{ {peer.lower()}Id, skip = (page - 1) * size, size }});
        return rows.AsList();
    }}

    public Task<int> InsertAsync({n} item) =>
        _db.ExecuteScalarAsync<int>(
            @"INSERT INTO dbo.{n}s ({col_list}, {peer}Id)
              VALUES ({", ".join("@" + c for c, _, _ in cols[:6])}, @{peer}Id);
              SELECT CAST(SCOPE_IDENTITY() AS INT);", item);

    public Task UpdateAsync({n} item) =>
        _db.ExecuteAsync(
            @"UPDATE dbo.{n}s SET {", ".join(f"{c} = @{c}" for c, _, _ in cols[:6])}, UpdatedAt = SYSUTCDATETIME()
              WHERE Id = @Id", item);
{repo_methods}
}}
""",
        )
    )
    svc_methods = "\n".join(
        f"""
    /// <summary>{v}s a {n.lower()} after checking its state.</summary>
    public async Task<bool> {v}Async(int id, string reason, CancellationToken ct = default)
    {{
        if (string.IsNullOrWhiteSpace(reason))
            throw new ArgumentException("A reason is required", nameof(reason));
        var item = await _repository.FindAsync(id) ?? throw new KeyNotFoundException($"{n} {{id}}");
        if (!item.CanTransition({i}))
        {{
            _logger.LogWarning("{n} {{Id}} cannot {v.lower()} from state {{Status}}", id, item.Status);
            return false;
        }}
        var affected = await _repository.{v}Async(id, reason);
        if (affected == 0) return false;
        await _{peer.lower()}s.TouchAsync(item.{peer}Id, ct);
        _metrics.Increment("{n.lower()}.{v.lower()}");
        return true;
    }}"""
        for i, v in enumerate(verbs)
    )
    files.append(
        (
            f"src/Application/{n}Service.cs",
            f"""using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using Contoso.Domain.Abstractions;
using Contoso.Domain.Entities;

namespace Contoso.Application.Services;

/// <summary>Use cases of the {n.lower()} module.</summary>
public sealed class {n}Service : I{n}Service
{{
    private readonly I{n}Repository _repository;
    private readonly I{peer}Service _{peer.lower()}s;
    private readonly IMetrics _metrics;
    private readonly ILogger<{n}Service> _logger;

    public {n}Service(I{n}Repository repository, I{peer}Service {peer.lower()}s, IMetrics metrics, ILogger<{n}Service> logger)
    {{
        _repository = repository ?? throw new ArgumentNullException(nameof(repository));
        _{peer.lower()}s = {peer.lower()}s;
        _metrics = metrics;
        _logger = logger;
    }}

    public async Task<{n}Dto?> GetAsync(int id)
    {{
        var entity = await _repository.FindAsync(id);
        return entity is null ? null : new {n}Dto(entity.Id, entity.Name, entity.Status);
    }}

    public async Task<int> CreateAsync(Create{n}Request request, CancellationToken ct = default)
    {{
        if (string.IsNullOrWhiteSpace(request.Name)) throw new ArgumentException("Name is required");
        var id = await _repository.InsertAsync(new {n} {{ Name = request.Name, {peer}Id = request.{peer}Id, IsActive = true }});
        _logger.LogInformation("Created {n} {{Id}}", id);
        return id;
    }}

    public Task TouchAsync(int id, CancellationToken ct = default) =>
        _repository.UpdateAsync(new {n} {{ Id = id, UpdatedAt = DateTime.UtcNow }});
{svc_methods}
}}
""",
        )
    )
    actions = "\n".join(
        f"""
    [HttpPost("{{id:int}}/{v.lower()}")]
    public async Task<IActionResult> {v}(int id, [FromBody] string reason, CancellationToken ct)
    {{
        var ok = await _service.{v}Async(id, reason, ct);
        return ok ? NoContent() : Conflict();
    }}"""
        for v in verbs
    )
    files.append(
        (
            f"src/Api/{n}sController.cs",
            f"""using Microsoft.AspNetCore.Mvc;
using Contoso.Application.Services;

namespace Contoso.Api.Controllers;

[ApiController]
[Route("api/{n.lower()}s")]
public class {n}sController : ControllerBase
{{
    private readonly {n}Service _service;
    public {n}sController({n}Service service) => _service = service;

    [HttpGet("{{id:int}}")]
    public async Task<ActionResult<{n}Dto>> Get(int id)
    {{
        var dto = await _service.GetAsync(id);
        return dto is null ? NotFound() : Ok(dto);
    }}

    [HttpPost]
    public async Task<ActionResult<int>> Create([FromBody] Create{n}Request request, CancellationToken ct)
        => Ok(await _service.CreateAsync(request, ct));
{actions}
}}
""",
        )
    )
    table_cols = ",\n".join(
        f"    [{c}] {sql} {'NOT NULL' if not t.endswith('?') else 'NULL'}" for c, sql, t in cols
    )
    files.append(
        (
            f"Database/Tables/{n}s.sql",
            f"""CREATE TABLE [dbo].[{n}s] (
    [Id] INT IDENTITY(1,1) NOT NULL,
{table_cols},
    [{peer}Id] INT NOT NULL,
    CONSTRAINT [PK_{n}s] PRIMARY KEY CLUSTERED ([Id] ASC),
    CONSTRAINT [FK_{n}s_{peer}s] FOREIGN KEY ([{peer}Id]) REFERENCES [dbo].[{peer}s] ([Id])
);
GO
CREATE NONCLUSTERED INDEX [IX_{n}s_{peer}Id] ON [dbo].[{n}s] ([{peer}Id]) INCLUDE ([{cols[0][0]}]);
GO
CREATE TABLE [dbo].[{n}Events] (
    [Id] BIGINT IDENTITY(1,1) NOT NULL PRIMARY KEY,
    [{n}Id] INT NOT NULL REFERENCES [dbo].[{n}s] ([Id]),
    [Kind] NVARCHAR(32) NOT NULL,
    [Reason] NVARCHAR(400) NULL,
    [At] DATETIME2(3) NOT NULL DEFAULT (SYSUTCDATETIME())
);
GO
""",
        )
    )
    for v in verbs:
        files.append(
            (
                f"Database/Procedures/usp_{v}{n}.sql",
                f"""SET ANSI_NULLS ON
GO
SET QUOTED_IDENTIFIER ON
GO
-- =============================================
-- Description: {v.lower()}s one {n.lower()} and records the event.
-- =============================================
CREATE OR ALTER PROCEDURE [dbo].[usp_{v}{n}]
    @Id INT,
    @Reason NVARCHAR(400),
    @At DATETIME2(3) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @now DATETIME2(3) = COALESCE(@At, SYSUTCDATETIME());
    DECLARE @status TINYINT;

    SELECT @status = Status FROM dbo.{n}s WITH (UPDLOCK, HOLDLOCK) WHERE Id = @Id;
    IF @status IS NULL
    BEGIN
        RAISERROR('{n} %d not found', 16, 1, @Id);
        RETURN;
    END

    BEGIN TRY
        BEGIN TRANSACTION;
        UPDATE dbo.{n}s
           SET Status = {r.randint(1, 9)}, UpdatedAt = @now
         WHERE Id = @Id;
        INSERT INTO dbo.{n}Events ({n}Id, Kind, Reason, At)
        VALUES (@Id, N'{v}', @Reason, @now);
        UPDATE p SET p.UpdatedAt = @now
          FROM dbo.{peer}s p
          JOIN dbo.{n}s x ON x.{peer}Id = p.Id
         WHERE x.Id = @Id;
        EXEC dbo.usp_LogEvent @Source = N'{n}', @Message = @Reason;{_extra_steps(r, n, peer, cols, steps)}
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH

    SELECT @@ROWCOUNT AS Affected;
END
GO
""",
            )
        )
    files.append(
        (
            f"Database/Views/vw_{n}Summary.sql",
            f"""CREATE VIEW dbo.vw_{n}Summary
AS
SELECT p.Id AS {peer}Id, COUNT(x.Id) AS {n}Count, SUM(x.{next((c for c, s, _ in cols if s.startswith("DECIMAL")), "Quantity")}) AS Total,
       MAX(x.CreatedAt) AS LastCreatedAt
FROM dbo.{peer}s p
LEFT JOIN dbo.{n}s x ON x.{peer}Id = p.Id AND x.IsActive = 1
GROUP BY p.Id;
GO
""",
        )
    )
    return files


def codebase(
    modules: int = 60,
    seed: int = 1,
    members: tuple[int, int] = (4, 7),
    steps: tuple[int, int] = (0, 0),
) -> list[tuple[str, str]]:
    """(relative path, text) of a generated solution: `modules` modules of full-size files.

    members: how many use cases (service methods, repository methods, procedures) a module
    has, drawn from this range; more use cases make the C# files larger. steps: extra
    statement groups per procedure (about 1 KB each), for longer procedures.
    """
    r = random.Random(seed)
    names = [a + b for b in ["", "Line", "Item", "Batch", "History", "Policy"] for a in NOUNS]
    names = names[:modules]
    files: list[tuple[str, str]] = []
    for n in names:
        files += _module_files(r, n, names, members, steps)
    return files
