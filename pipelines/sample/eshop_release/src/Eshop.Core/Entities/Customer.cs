namespace Eshop.Core.Entities;

/// <summary>A registered customer.</summary>
public class Customer
{
    public int Id { get; set; }
    public string Name { get; set; } = "";
    public string Email { get; set; } = "";
    public bool IsVip { get; set; }
}

/// <summary>A shopping basket item.</summary>
public record BasketItem(int ProductId, int Quantity, decimal UnitPrice);

/// <summary>A customer's shopping basket.</summary>
public class Basket
{
    public int Id { get; set; }
    public int CustomerId { get; set; }
    public List<BasketItem> Items { get; set; } = new();
}
