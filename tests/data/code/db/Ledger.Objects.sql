CREATE OR ALTER VIEW [dbo].[vw_AccountBalances]
AS
SELECT a.Id, a.Currency, SUM(j.Amount) AS Total
FROM dbo.Accounts AS a
LEFT JOIN dbo.JournalLines AS j ON j.AccountId = a.Id
GROUP BY a.Id, a.Currency;
GO

CREATE FUNCTION dbo.fn_AccountBalance (@AccountId INT)
RETURNS DECIMAL(19, 4)
AS
BEGIN
    RETURN (SELECT ISNULL(SUM(Amount), 0) FROM dbo.JournalLines WHERE AccountId = @AccountId);
END;
GO

CREATE TRIGGER [dbo].[trg_JournalLines_Balance] ON [dbo].[JournalLines]
AFTER INSERT
AS
BEGIN
    SET NOCOUNT ON;
    UPDATE a SET a.Balance = a.Balance + i.Amount
    FROM dbo.Accounts a
    JOIN inserted i ON i.AccountId = a.Id;
END;
GO

create procedure dbo.usp_LogError @Procedure nvarchar(128)
as
    insert into dbo.ErrorLog (ProcedureName, Message, LoggedAt)
    values (@Procedure, error_message(), sysutcdatetime());
go
