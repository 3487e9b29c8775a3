using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using Ledger.Core.Abstractions;

namespace Ledger.Core.Services
{
    /// <summary>
    /// Moves money between accounts and records the journal entries.
    /// </summary>
    public sealed class FundsTransferService : ServiceBase, IFundsTransferService
    {
        private readonly IAccountRepository _accounts;
        private readonly IJournalWriter _journal;
        private readonly ILogger<FundsTransferService> _logger;

        public FundsTransferService(
            IAccountRepository accounts,
            IJournalWriter journal,
            ILogger<FundsTransferService> logger)
        {
            _accounts = accounts ?? throw new ArgumentNullException(nameof(accounts));
            _journal = journal;
            _logger = logger;
        }

        /// <summary>Maximum amount a single transfer may move.</summary>
        public decimal Limit { get; init; } = 50_000m;

        /// <summary>Transfers an amount; returns the journal id.</summary>
        public async Task<long> TransferAsync(int fromId, int toId, decimal amount, CancellationToken ct = default)
        {
            if (amount <= 0 || amount > Limit)
            {
                throw new TransferRejectedException($"amount {amount} outside (0, {Limit}]");
            }

            var from = await _accounts.GetAsync(fromId, ct);
            var to = await _accounts.GetAsync(toId, ct);
            var entry = new JournalEntry(from.Id, to.Id, amount, DateTime.UtcNow);
            var id = await _journal.WriteAsync(entry, ct);
            _logger.LogInformation("Transfer {Id} booked", id);
            return id;
        }

        private static bool IsSameCurrency(Account a, Account b) => a.Currency == b.Currency;
    }

    public record JournalEntry(int FromAccountId, int ToAccountId, decimal Amount, DateTime BookedAt);

    public interface IFundsTransferService
    {
        Task<long> TransferAsync(int fromId, int toId, decimal amount, CancellationToken ct = default);
    }

    public enum TransferStatus
    {
        Pending,
        Booked,
        Rejected,
    }
}
