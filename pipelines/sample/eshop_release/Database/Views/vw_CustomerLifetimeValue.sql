-- Lifetime value per customer (paid and shipped orders).
CREATE VIEW dbo.vw_CustomerLifetimeValue
AS
SELECT c.Id AS CustomerId, c.Name, SUM(o.Total) AS LifetimeValue, COUNT(*) AS Orders
FROM dbo.Customers c
JOIN dbo.Orders o ON o.CustomerId = c.Id
WHERE o.Status IN (1, 2)
GROUP BY c.Id, c.Name;
GO
