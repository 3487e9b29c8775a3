using System.Collections.Generic;
using System.Data;
using System.Threading.Tasks;
using Dapper;

namespace Ledger.Infrastructure.Data
{
    public class StatementQueries
    {
        private const string LinesSql = @"
            SELECT j.Id, j.Amount, j.BookedAt
            FROM dbo.JournalLines j
            INNER JOIN dbo.Accounts a ON a.Id = j.AccountId
            WHERE j.AccountId = @AccountId
            ORDER BY j.BookedAt DESC";

        private readonly IDbConnection _db;

        public StatementQueries(IDbConnection db) { _db = db; }

        public Task<IEnumerable<StatementLine>> LinesAsync(int accountId) =>
            _db.QueryAsync<StatementLine>(LinesSql, new { AccountId = accountId });

        public Task<int> ArchiveAsync(int days) =>
            _db.ExecuteAsync("DELETE FROM dbo.JournalLines WHERE BookedAt < DATEADD(day, -@days, SYSUTCDATETIME())", new { days });

        public Task<decimal> BalanceAsync(int accountId) =>
            _db.ExecuteScalarAsync<decimal>("SELECT dbo.fn_AccountBalance(@accountId)", new { accountId });
    }

    public sealed record StatementLine(long Id, decimal Amount, System.DateTime BookedAt);
}
