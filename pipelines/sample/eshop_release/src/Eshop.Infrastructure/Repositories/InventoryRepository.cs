using System.Data;
using Dapper;
using Eshop.Core.Interfaces;

namespace Eshop.Infrastructure.Repositories;

/// <summary>Stock levels (Dapper).</summary>
public class InventoryRepository : IInventoryRepository
{
    private readonly IDbConnection _db;

    public InventoryRepository(IDbConnection db) => _db = db;

    /// <summary>Units available for sale.</summary>
    public Task<int> GetAvailableAsync(int productId) =>
        _db.QuerySingleAsync<int>("SELECT dbo.fn_AvailableStock(@productId)", new { productId });

    /// <summary>Atomically decrements stock when enough is available.</summary>
    public async Task<bool> TryReserveAsync(int productId, int quantity)
    {
        var rows = await _db.ExecuteAsync(
            "UPDATE dbo.Inventory SET Reserved = Reserved + @quantity WHERE ProductId = @productId AND OnHand - Reserved >= @quantity",
            new { productId, quantity });
        return rows == 1;
    }
}
