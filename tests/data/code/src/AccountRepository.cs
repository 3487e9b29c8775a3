using System.Collections.Generic;
using System.Data;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Data.SqlClient;
using Ledger.Core.Abstractions;

namespace Ledger.Infrastructure.Data;

/// <summary>ADO.NET access to accounts.</summary>
public class AccountRepository : IAccountRepository
{
    private readonly string _connectionString;

    public AccountRepository(string connectionString) => _connectionString = connectionString;

    public async Task<Account> GetAsync(int id, CancellationToken ct)
    {
        await using var connection = new SqlConnection(_connectionString);
        await connection.OpenAsync(ct);
        using var command = new SqlCommand(
            "SELECT a.Id, a.Currency, a.Balance FROM dbo.Accounts a WITH (NOLOCK) WHERE a.Id = @id",
            connection);
        command.Parameters.AddWithValue("@id", id);
        using var reader = await command.ExecuteReaderAsync(ct);
        if (!await reader.ReadAsync(ct))
        {
            throw new KeyNotFoundException($"account {id}");
        }
        return new Account(reader.GetInt32(0), reader.GetString(1), reader.GetDecimal(2));
    }

    public async Task TransferAsync(int fromId, int toId, decimal amount, CancellationToken ct)
    {
        await using var connection = new SqlConnection(_connectionString);
        await connection.OpenAsync(ct);
        using var command = connection.CreateCommand();
        command.CommandType = CommandType.StoredProcedure;
        command.CommandText = "[dbo].[usp_TransferFunds]";
        command.Parameters.AddWithValue("@FromAccountId", fromId);
        command.Parameters.AddWithValue("@ToAccountId", toId);
        command.Parameters.AddWithValue("@Amount", amount);
        await command.ExecuteNonQueryAsync(ct);
    }
}
