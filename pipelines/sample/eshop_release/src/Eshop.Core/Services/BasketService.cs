using Eshop.Core.Entities;
using Eshop.Core.Interfaces;

namespace Eshop.Core.Services;

/// <summary>Adds and removes items in a customer's shopping basket.</summary>
public class BasketService
{
    private readonly IBasketRepository _baskets;
    private readonly IInventoryRepository _inventory;

    public BasketService(IBasketRepository baskets, IInventoryRepository inventory)
    {
        _baskets = baskets;
        _inventory = inventory;
    }

    /// <summary>Adds a product to the basket if enough stock is available.</summary>
    public async Task<Basket> AddItemAsync(int customerId, int productId, int quantity, decimal unitPrice)
    {
        if (quantity <= 0) throw new ArgumentOutOfRangeException(nameof(quantity));
        var available = await _inventory.GetAvailableAsync(productId);
        if (available < quantity)
        {
            throw new OutOfStockException(productId);
        }
        var basket = await _baskets.GetForCustomerAsync(customerId) ?? new Basket { CustomerId = customerId };
        basket.Items.Add(new BasketItem(productId, quantity, unitPrice));
        await _baskets.SaveAsync(basket);
        return basket;
    }

    /// <summary>Total price of the basket.</summary>
    public decimal Total(Basket basket) => basket.Items.Sum(i => i.UnitPrice * i.Quantity);
}
