-- Units of a product available for sale (on hand minus reserved).
CREATE FUNCTION dbo.fn_AvailableStock (@ProductId INT)
RETURNS INT
AS
BEGIN
    DECLARE @available INT;
    SELECT @available = OnHand - Reserved FROM dbo.Inventory WHERE ProductId = @ProductId;
    RETURN ISNULL(@available, 0);
END
GO
