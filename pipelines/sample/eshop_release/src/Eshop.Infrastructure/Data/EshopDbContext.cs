using Eshop.Core.Entities;
using Microsoft.EntityFrameworkCore;

namespace Eshop.Infrastructure.Data;

/// <summary>EF Core context for the shop database.</summary>
public class EshopDbContext : DbContext
{
    public EshopDbContext(DbContextOptions<EshopDbContext> options) : base(options) { }

    public DbSet<Order> Orders => Set<Order>();
    public DbSet<Customer> Customers => Set<Customer>();

    /// <summary>Maps entities to the dbo tables.</summary>
    protected override void OnModelCreating(ModelBuilder modelBuilder)
    {
        modelBuilder.Entity<Order>().ToTable("Orders", "dbo").HasKey(o => o.Id);
        modelBuilder.Entity<OrderLine>().ToTable("OrderLines", "dbo").HasKey(l => new { l.OrderId, l.ProductId });
        modelBuilder.Entity<Customer>().ToTable("Customers", "dbo");
    }

    /// <summary>VIP customers with their lifetime spend, straight from SQL.</summary>
    public IQueryable<Customer> VipCustomers() =>
        Customers.FromSqlRaw("SELECT c.* FROM dbo.Customers c JOIN dbo.vw_CustomerLifetimeValue v ON v.CustomerId = c.Id WHERE v.LifetimeValue > 10000");
}
