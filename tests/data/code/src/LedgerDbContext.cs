using System.Linq;
using Microsoft.EntityFrameworkCore;

namespace Ledger.Infrastructure.Data;

public class LedgerDbContext : DbContext
{
    public LedgerDbContext(DbContextOptions<LedgerDbContext> options) : base(options) { }

    public DbSet<Account> Accounts => Set<Account>();

    public IQueryable<Account> Overdrawn() =>
        Accounts.FromSqlRaw("SELECT * FROM dbo.Accounts WHERE Balance < 0");

    public int Freeze(int id) =>
        Database.ExecuteSqlInterpolated($"UPDATE dbo.Accounts SET Frozen = 1 WHERE Id = {id}");

    protected override void OnModelCreating(ModelBuilder modelBuilder)
    {
        modelBuilder.Entity<Account>().ToTable("Accounts", "dbo").HasKey(a => a.Id);
    }
}
