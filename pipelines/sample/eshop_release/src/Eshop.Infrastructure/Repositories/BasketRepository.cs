using Eshop.Core.Entities;
using Eshop.Core.Interfaces;
using Microsoft.Data.SqlClient;

namespace Eshop.Infrastructure.Repositories;

/// <summary>Baskets with plain ADO.NET.</summary>
public class BasketRepository : IBasketRepository
{
    private readonly string _connectionString;

    public BasketRepository(string connectionString)
    {
        _connectionString = connectionString;
    }

    /// <summary>Reads the open basket of a customer.</summary>
    public async Task<Basket?> GetForCustomerAsync(int customerId)
    {
        await using var conn = new SqlConnection(_connectionString);
        await conn.OpenAsync();
        using var cmd = new SqlCommand(
            "SELECT b.Id, i.ProductId, i.Quantity, i.UnitPrice FROM dbo.Baskets b " +
            "LEFT JOIN dbo.BasketItems i ON i.BasketId = b.Id WHERE b.CustomerId = @customerId", conn);
        cmd.Parameters.AddWithValue("@customerId", customerId);
        Basket? basket = null;
        await using var reader = await cmd.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            basket ??= new Basket { Id = reader.GetInt32(0), CustomerId = customerId };
            if (!reader.IsDBNull(1))
                basket.Items.Add(new BasketItem(reader.GetInt32(1), reader.GetInt32(2), reader.GetDecimal(3)));
        }
        return basket;
    }

    /// <summary>Saves the basket's items (replaces them).</summary>
    public async Task SaveAsync(Basket basket)
    {
        await using var conn = new SqlConnection(_connectionString);
        await conn.OpenAsync();
        var cmd = conn.CreateCommand();
        cmd.CommandText = "DELETE FROM dbo.BasketItems WHERE BasketId = @id";
        cmd.Parameters.AddWithValue("@id", basket.Id);
        await cmd.ExecuteNonQueryAsync();
        foreach (var item in basket.Items)
        {
            var insert = new SqlCommand("INSERT INTO dbo.BasketItems (BasketId, ProductId, Quantity, UnitPrice) VALUES (@b, @p, @q, @u)", conn);
            insert.Parameters.AddWithValue("@b", basket.Id);
            insert.Parameters.AddWithValue("@p", item.ProductId);
            insert.Parameters.AddWithValue("@q", item.Quantity);
            insert.Parameters.AddWithValue("@u", item.UnitPrice);
            await insert.ExecuteNonQueryAsync();
        }
    }

    /// <summary>Empties a basket after an order was placed.</summary>
    public async Task ClearAsync(int basketId)
    {
        await using var conn = new SqlConnection(_connectionString);
        await conn.OpenAsync();
        using var cmd = new SqlCommand("DELETE FROM dbo.BasketItems WHERE BasketId = @id", conn);
        cmd.Parameters.AddWithValue("@id", basketId);
        await cmd.ExecuteNonQueryAsync();
    }
}
