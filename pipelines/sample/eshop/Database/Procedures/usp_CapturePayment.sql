-- Records a captured payment and marks the order as paid.
CREATE PROCEDURE dbo.usp_CapturePayment
    @OrderId  INT,
    @Amount   DECIMAL(18, 2),
    @Provider VARCHAR(40)
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @PaymentId INT;
    BEGIN TRANSACTION;
        INSERT INTO dbo.Payments (OrderId, Amount, Provider) VALUES (@OrderId, @Amount, @Provider);
        SET @PaymentId = SCOPE_IDENTITY();
        UPDATE dbo.Orders SET Status = 1 WHERE Id = @OrderId;
    COMMIT TRANSACTION;
    SELECT @PaymentId;
END
GO
