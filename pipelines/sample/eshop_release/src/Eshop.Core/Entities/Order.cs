using System;
using System.Collections.Generic;

namespace Eshop.Core.Entities;

/// <summary>An order placed by a customer.</summary>
public class Order
{
    public int Id { get; set; }
    public int CustomerId { get; set; }
    public OrderStatus Status { get; set; }
    public DateTime CreatedAt { get; set; }
    public decimal Total { get; set; }
    public List<OrderLine> Lines { get; set; } = new();

    /// <summary>Recomputes the order total from its lines.</summary>
    public decimal RecalculateTotal()
    {
        Total = 0;
        foreach (var line in Lines)
        {
            Total += line.UnitPrice * line.Quantity;
        }
        return Total;
    }
}

/// <summary>One product line of an order.</summary>
public class OrderLine
{
    public int OrderId { get; set; }
    public int ProductId { get; set; }
    public int Quantity { get; set; }
    public decimal UnitPrice { get; set; }
}

/// <summary>Lifecycle of an order.</summary>
public enum OrderStatus
{
    Pending = 0,
    Paid = 1,
    Shipped = 2,
    Cancelled = 3
}
