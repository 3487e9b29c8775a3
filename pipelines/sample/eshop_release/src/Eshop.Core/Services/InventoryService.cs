using Eshop.Core.Interfaces;

namespace Eshop.Core.Services;

/// <summary>Reserves stock for orders.</summary>
public class InventoryService
{
    private readonly IInventoryRepository _inventory;

    public InventoryService(IInventoryRepository inventory)
    {
        _inventory = inventory;
    }

    /// <summary>Reserves a quantity of a product; false when stock is short.</summary>
    public async Task<bool> ReserveAsync(int productId, int quantity)
    {
        if (quantity <= 0) return false;
        return await _inventory.TryReserveAsync(productId, quantity);
    }
}
