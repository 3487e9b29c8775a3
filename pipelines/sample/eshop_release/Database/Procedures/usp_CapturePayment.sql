-- Records a captured payment, marks the order as paid and writes the payment audit trail
-- (release 2: every capture is audited in dbo.PaymentAudit with the provider and amount).
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
        INSERT INTO dbo.PaymentAudit (PaymentId, OrderId, Amount, Provider, CapturedAt)
        VALUES (@PaymentId, @OrderId, @Amount, @Provider, SYSUTCDATETIME());
    COMMIT TRANSACTION;
    SELECT @PaymentId;
END
GO
