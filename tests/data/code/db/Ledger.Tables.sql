-- Ledger schema: accounts and journal lines.
CREATE TABLE [dbo].[Accounts]
(
    [Id]        INT            IDENTITY (1, 1) NOT NULL,
    [Currency]  CHAR (3)       NOT NULL CONSTRAINT [DF_Accounts_Currency] DEFAULT ('EUR'),
    [Balance]   DECIMAL (19, 4) NOT NULL,
    [Frozen]    BIT            NOT NULL DEFAULT (0),
    [OwnerId]   INT            NULL,
    CONSTRAINT [PK_Accounts] PRIMARY KEY CLUSTERED ([Id] ASC),
    CONSTRAINT [CK_Accounts_Currency] CHECK (LEN([Currency]) = 3)
);
GO

CREATE TABLE dbo.JournalLines (
    Id        BIGINT IDENTITY(1,1) NOT NULL PRIMARY KEY,
    AccountId INT NOT NULL CONSTRAINT FK_JournalLines_Accounts REFERENCES dbo.Accounts (Id),
    Amount    DECIMAL(19, 4) NOT NULL,
    BookedAt  DATETIME2(3) NOT NULL
);
GO

CREATE NONCLUSTERED INDEX IX_JournalLines_Account ON dbo.JournalLines (AccountId, BookedAt DESC);
GO

CREATE SEQUENCE dbo.JournalNumbers AS BIGINT START WITH 1 INCREMENT BY 1;
GO

CREATE TYPE dbo.AccountIdList AS TABLE (Id INT NOT NULL PRIMARY KEY);
GO

ALTER TABLE dbo.Accounts WITH CHECK
    ADD CONSTRAINT FK_Accounts_Owners FOREIGN KEY (OwnerId) REFERENCES dbo.Owners (Id);
GO
