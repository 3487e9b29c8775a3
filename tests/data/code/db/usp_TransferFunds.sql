/* Moves money between two accounts.
   GO inside this comment must not split a batch.
GO
*/
CREATE OR ALTER PROCEDURE [dbo].[usp_TransferFunds]
    @FromAccountId INT,
    @ToAccountId   INT,
    @Amount        DECIMAL(19, 4),
    @JournalId     BIGINT = NULL OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @Moves TABLE (AccountId INT, Delta DECIMAL(19, 4));
    CREATE TABLE #Audit (Note NVARCHAR(200));

    BEGIN TRY
        BEGIN TRANSACTION;

        ;WITH Balances AS (
            SELECT a.Id, a.Balance FROM [Ledger].[dbo].[Accounts] a WITH (UPDLOCK)
            WHERE a.Id IN (@FromAccountId, @ToAccountId)
        )
        SELECT @Amount = @Amount FROM Balances WHERE Id = @FromAccountId AND Balance >= @Amount;

        IF @@ROWCOUNT = 0
            THROW 50001, 'Insufficient funds -- or unknown account; DELETE FROM dbo.Nothing', 1;

        UPDATE dbo.Accounts SET Balance = Balance - @Amount WHERE Id = @FromAccountId;
        UPDATE [dbo].[Accounts] SET Balance = Balance + @Amount WHERE Id = @ToAccountId;

        INSERT INTO @Moves (AccountId, Delta) VALUES (@FromAccountId, -@Amount), (@ToAccountId, @Amount);
        INSERT INTO #Audit (Note) VALUES (N'transfer');

        INSERT INTO dbo.JournalLines (AccountId, Amount, BookedAt)
        SELECT m.AccountId, m.Delta, SYSUTCDATETIME() FROM @Moves m;
        SET @JournalId = SCOPE_IDENTITY();

        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        EXEC dbo.usp_LogError @Procedure = N'usp_TransferFunds';
        THROW;
    END CATCH
END
GO
