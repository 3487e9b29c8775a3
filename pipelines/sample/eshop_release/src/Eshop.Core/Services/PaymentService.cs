using Eshop.Core.Interfaces;

namespace Eshop.Core.Services;

/// <summary>Captures payments for orders, retrying transient failures.</summary>
public class PaymentService
{
    private const int MaxAttempts = 3;
    private readonly IPaymentRepository _payments;

    public PaymentService(IPaymentRepository payments)
    {
        _payments = payments;
    }

    /// <summary>Captures the amount with the provider; retries up to three times.</summary>
    public async Task<int> CaptureAsync(int orderId, decimal amount, string provider)
    {
        for (var attempt = 1; ; attempt++)
        {
            try
            {
                return await _payments.CaptureAsync(orderId, amount, provider);
            }
            catch (TimeoutException) when (attempt < MaxAttempts)
            {
                await Task.Delay(200 * attempt);
            }
        }
    }
}
