using Microsoft.EntityFrameworkCore.Migrations;

namespace Eshop.Infrastructure.Migrations;

/// <summary>Adds the order audit table and its trigger.</summary>
public partial class AddOrderAudit : Migration
{
    protected override void Up(MigrationBuilder migrationBuilder)
    {
        migrationBuilder.Sql(@"CREATE TABLE dbo.OrderAudit (
            Id BIGINT IDENTITY(1,1) NOT NULL PRIMARY KEY,
            OrderId INT NOT NULL,
            Action NVARCHAR(20) NOT NULL,
            At DATETIME2 NOT NULL DEFAULT SYSUTCDATETIME())");
    }

    protected override void Down(MigrationBuilder migrationBuilder)
    {
        migrationBuilder.Sql("DROP TABLE dbo.OrderAudit");
    }
}
