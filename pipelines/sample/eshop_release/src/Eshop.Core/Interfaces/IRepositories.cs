using Eshop.Core.Entities;

namespace Eshop.Core.Interfaces;

/// <summary>Persists orders.</summary>
public interface IOrderRepository
{
    Task<int> PlaceOrderAsync(int customerId, IReadOnlyList<OrderLine> lines);
    Task<Order?> GetByIdAsync(int orderId);
    Task CancelAsync(int orderId, string reason);
}

/// <summary>Reads and writes shopping baskets.</summary>
public interface IBasketRepository
{
    Task<Basket?> GetForCustomerAsync(int customerId);
    Task SaveAsync(Basket basket);
    Task ClearAsync(int basketId);
}

/// <summary>Stock levels per product.</summary>
public interface IInventoryRepository
{
    Task<int> GetAvailableAsync(int productId);
    Task<bool> TryReserveAsync(int productId, int quantity);
}

/// <summary>Payments for orders.</summary>
public interface IPaymentRepository
{
    Task<int> CaptureAsync(int orderId, decimal amount, string provider);
}
