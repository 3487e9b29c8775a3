using Eshop.Core.Services;
using Microsoft.AspNetCore.Mvc;

namespace Eshop.Api.Controllers;

/// <summary>HTTP endpoints for orders.</summary>
[ApiController]
[Route("api/orders")]
public class OrdersController : ControllerBase
{
    private readonly IOrderService _orders;
    private readonly PaymentService _payments;

    public OrdersController(IOrderService orders, PaymentService payments)
    {
        _orders = orders;
        _payments = payments;
    }

    /// <summary>Places an order from the customer's basket.</summary>
    [HttpPost("{customerId:int}")]
    public async Task<IActionResult> Place(int customerId)
    {
        try
        {
            var id = await _orders.PlaceOrderAsync(customerId);
            return CreatedAtAction(nameof(Place), new { id }, new { id });
        }
        catch (OutOfStockException ex)
        {
            return Conflict(ex.Message);
        }
    }

    /// <summary>Cancels an order.</summary>
    [HttpDelete("{orderId:int}")]
    public async Task<IActionResult> Cancel(int orderId, [FromQuery] string reason)
    {
        await _orders.CancelOrderAsync(orderId, reason);
        return NoContent();
    }

    /// <summary>Pays for an order.</summary>
    [HttpPost("{orderId:int}/payments")]
    public async Task<IActionResult> Pay(int orderId, decimal amount, string provider)
    {
        var paymentId = await _payments.CaptureAsync(orderId, amount, provider);
        return Ok(new { paymentId });
    }
}
