/*
  Places an order: inserts the order and its lines, reserves stock and computes the total.
  Called by OrderRepository.PlaceOrderAsync.
*/
CREATE OR ALTER PROCEDURE [dbo].[usp_PlaceOrder]
    @CustomerId INT,
    @Lines      dbo.OrderLineType READONLY,
    @OrderId    INT OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    BEGIN TRY
        BEGIN TRANSACTION;

        IF NOT EXISTS (SELECT 1 FROM dbo.Customers WHERE Id = @CustomerId)
            THROW 50001, 'Unknown customer', 1;

        ;WITH shortages AS (
            SELECT l.ProductId
            FROM @Lines l
            JOIN dbo.Inventory i ON i.ProductId = l.ProductId
            WHERE i.OnHand - i.Reserved < l.Quantity
        )
        SELECT @OrderId = NULL FROM shortages;

        INSERT INTO dbo.Orders (CustomerId, Status, Total)
        VALUES (@CustomerId, 0, 0);
        SET @OrderId = SCOPE_IDENTITY();

        INSERT INTO dbo.OrderLines (OrderId, ProductId, Quantity, UnitPrice)
        SELECT @OrderId, ProductId, Quantity, UnitPrice FROM @Lines;

        UPDATE i
        SET i.OnHand = i.OnHand - l.Quantity,
            i.Reserved = i.Reserved - l.Quantity
        FROM dbo.Inventory i
        JOIN @Lines l ON l.ProductId = i.ProductId;

        UPDATE dbo.Orders
        SET Total = (SELECT SUM(Quantity * UnitPrice) FROM dbo.OrderLines WHERE OrderId = @OrderId)
        WHERE Id = @OrderId;

        EXEC dbo.usp_LogEvent @Source = 'usp_PlaceOrder', @Message = N'order placed';

        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        EXEC dbo.usp_LogEvent @Source = 'usp_PlaceOrder', @Message = N'order failed -- rolled back';
        THROW;
    END CATCH
END
GO
