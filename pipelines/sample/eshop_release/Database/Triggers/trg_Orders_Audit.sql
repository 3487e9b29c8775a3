-- Writes an audit row for every order insert or status change.
CREATE TRIGGER dbo.trg_Orders_Audit
ON dbo.Orders
AFTER INSERT, UPDATE
AS
BEGIN
    SET NOCOUNT ON;
    INSERT INTO dbo.OrderAudit (OrderId, Action)
    SELECT i.Id, CASE WHEN d.Id IS NULL THEN 'created' ELSE 'updated' END
    FROM inserted i
    LEFT JOIN deleted d ON d.Id = i.Id;
END
GO
