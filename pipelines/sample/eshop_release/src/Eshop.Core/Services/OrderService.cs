using Eshop.Core.Entities;
using Eshop.Core.Interfaces;
using Microsoft.Extensions.Logging;

namespace Eshop.Core.Services;

/// <summary>Places and cancels orders.</summary>
public class OrderService : IOrderService
{
    private readonly IOrderRepository _orders;
    private readonly IBasketRepository _baskets;
    private readonly InventoryService _inventory;
    private readonly ILogger<OrderService> _log;

    public OrderService(IOrderRepository orders, IBasketRepository baskets,
                        InventoryService inventory, ILogger<OrderService> log)
    {
        _orders = orders;
        _baskets = baskets;
        _inventory = inventory;
        _log = log;
    }

    /// <summary>Turns the customer's basket into an order, reserving stock first.</summary>
    public async Task<int> PlaceOrderAsync(int customerId)
    {
        var basket = await _baskets.GetForCustomerAsync(customerId)
            ?? throw new InvalidOperationException("The basket is empty.");
        foreach (var item in basket.Items)
        {
            if (!await _inventory.ReserveAsync(item.ProductId, item.Quantity))
            {
                throw new OutOfStockException(item.ProductId);
            }
        }
        var lines = basket.Items
            .Select(i => new OrderLine { ProductId = i.ProductId, Quantity = i.Quantity, UnitPrice = i.UnitPrice })
            .ToList();
        var orderId = await _orders.PlaceOrderAsync(customerId, lines);
        await _baskets.ClearAsync(basket.Id);
        _log.LogInformation("Order {OrderId} placed for customer {CustomerId}", orderId, customerId);
        return orderId;
    }

    /// <summary>Cancels an order that has not shipped yet.</summary>
    public async Task CancelOrderAsync(int orderId, string reason)
    {
        var order = await _orders.GetByIdAsync(orderId);
        if (order is null || order.Status == OrderStatus.Shipped)
        {
            throw new InvalidOperationException("Only pending or paid orders can be cancelled.");
        }
        await _orders.CancelAsync(orderId, reason);
    }
}

/// <summary>Order use cases.</summary>
public interface IOrderService
{
    Task<int> PlaceOrderAsync(int customerId);
    Task CancelOrderAsync(int orderId, string reason);
}

/// <summary>Raised when a product cannot be reserved.</summary>
public class OutOfStockException : Exception
{
    public OutOfStockException(int productId) : base($"Product {productId} is out of stock.") { }
}
