using Eshop.Core.Services;
using Microsoft.AspNetCore.Mvc;

namespace Eshop.Api.Controllers;

/// <summary>HTTP endpoints for the shopping basket.</summary>
[ApiController]
[Route("api/basket")]
public class BasketController : ControllerBase
{
    private readonly BasketService _baskets;

    public BasketController(BasketService baskets) => _baskets = baskets;

    /// <summary>Adds an item to the caller's basket.</summary>
    [HttpPost("{customerId:int}/items")]
    public async Task<IActionResult> AddItem(int customerId, int productId, int quantity, decimal unitPrice)
    {
        var basket = await _baskets.AddItemAsync(customerId, productId, quantity, unitPrice);
        return Ok(new { basket.Id, total = _baskets.Total(basket) });
    }
}
