-- Cancels a pending or paid order and puts its stock back.
CREATE OR ALTER PROCEDURE dbo.usp_CancelOrder
    @OrderId INT,
    @Reason  NVARCHAR(400)
AS
BEGIN
    SET NOCOUNT ON;
    BEGIN TRY
        BEGIN TRAN;
        UPDATE dbo.Orders SET Status = 3 WHERE Id = @OrderId AND Status IN (0, 1);
        IF @@ROWCOUNT = 0
            THROW 50002, 'Order cannot be cancelled', 1;
        UPDATE inv
        SET inv.OnHand = inv.OnHand + ol.Quantity
        FROM dbo.Inventory AS inv
        INNER JOIN dbo.OrderLines AS ol ON ol.ProductId = inv.ProductId
        WHERE ol.OrderId = @OrderId;
        EXEC dbo.usp_LogEvent @Source = 'usp_CancelOrder', @Message = @Reason;
        COMMIT;
    END TRY
    BEGIN CATCH
        IF XACT_STATE() <> 0 ROLLBACK;
        THROW;
    END CATCH
END
GO
