using System.Data;
using Dapper;
using Eshop.Core.Entities;
using Eshop.Core.Interfaces;
using Microsoft.Data.SqlClient;

namespace Eshop.Infrastructure.Repositories;

/// <summary>Orders through stored procedures (Dapper).</summary>
public class OrderRepository : IOrderRepository
{
    private readonly IDbConnection _db;

    public OrderRepository(IDbConnection db)
    {
        _db = db;
    }

    /// <summary>Places an order through dbo.usp_PlaceOrder in one transaction.</summary>
    public async Task<int> PlaceOrderAsync(int customerId, IReadOnlyList<OrderLine> lines)
    {
        var table = new DataTable();
        table.Columns.Add("ProductId", typeof(int));
        table.Columns.Add("Quantity", typeof(int));
        table.Columns.Add("UnitPrice", typeof(decimal));
        foreach (var l in lines) table.Rows.Add(l.ProductId, l.Quantity, l.UnitPrice);
        var p = new DynamicParameters();
        p.Add("@CustomerId", customerId);
        p.Add("@Lines", table.AsTableValuedParameter("dbo.OrderLineType"));
        p.Add("@OrderId", dbType: DbType.Int32, direction: ParameterDirection.Output);
        await _db.ExecuteAsync("dbo.usp_PlaceOrder", p, commandType: CommandType.StoredProcedure);
        return p.Get<int>("@OrderId");
    }

    /// <summary>Loads an order with its lines.</summary>
    public async Task<Order?> GetByIdAsync(int orderId)
    {
        const string sql = @"SELECT o.Id, o.CustomerId, o.Status, o.CreatedAt, o.Total
                             FROM dbo.Orders o WHERE o.Id = @orderId;
                             SELECT l.OrderId, l.ProductId, l.Quantity, l.UnitPrice
                             FROM dbo.OrderLines l WHERE l.OrderId = @orderId;";
        using var multi = await _db.QueryMultipleAsync(sql, new { orderId });
        var order = await multi.ReadSingleOrDefaultAsync<Order>();
        if (order != null) order.Lines = (await multi.ReadAsync<OrderLine>()).ToList();
        return order;
    }

    /// <summary>Cancels an order and restocks its lines (dbo.usp_CancelOrder).</summary>
    public async Task CancelAsync(int orderId, string reason)
    {
        await _db.ExecuteAsync("EXEC dbo.usp_CancelOrder @OrderId = @orderId, @Reason = @reason",
            new { orderId, reason });
    }
}
