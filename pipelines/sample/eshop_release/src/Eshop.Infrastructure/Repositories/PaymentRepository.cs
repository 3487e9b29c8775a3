using System.Data;
using Dapper;
using Eshop.Core.Interfaces;

namespace Eshop.Infrastructure.Repositories;

/// <summary>Payments through dbo.usp_CapturePayment.</summary>
public class PaymentRepository : IPaymentRepository
{
    private readonly IDbConnection _db;

    public PaymentRepository(IDbConnection db) => _db = db;

    /// <summary>Records a captured payment and marks the order paid.</summary>
    public Task<int> CaptureAsync(int orderId, decimal amount, string provider) =>
        _db.ExecuteScalarAsync<int>("dbo.usp_CapturePayment",
            new { OrderId = orderId, Amount = amount, Provider = provider },
            commandType: CommandType.StoredProcedure);
}
