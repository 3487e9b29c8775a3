-- Appends an application event.
CREATE TABLE dbo.EventLog (
    Id      BIGINT IDENTITY(1,1) PRIMARY KEY,
    Source  VARCHAR(100) NOT NULL,
    Message NVARCHAR(4000) NULL,
    At      DATETIME2(3) NOT NULL DEFAULT SYSUTCDATETIME()
);
GO
CREATE PROCEDURE dbo.usp_LogEvent @Source VARCHAR(100), @Message NVARCHAR(4000) = NULL
AS
    INSERT INTO dbo.EventLog (Source, Message) VALUES (@Source, @Message);
GO
