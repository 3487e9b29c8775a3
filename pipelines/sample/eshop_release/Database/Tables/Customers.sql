-- Customers of the shop.
CREATE TABLE [dbo].[Customers] (
    [Id]        INT            IDENTITY (1, 1) NOT NULL,
    [Name]      NVARCHAR (200) NOT NULL,
    [Email]     NVARCHAR (320) NOT NULL,
    [IsVip]     BIT            NOT NULL CONSTRAINT [DF_Customers_IsVip] DEFAULT (0),
    [CreatedAt] DATETIME2 (3)  NOT NULL CONSTRAINT [DF_Customers_CreatedAt] DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT [PK_Customers] PRIMARY KEY CLUSTERED ([Id] ASC),
    CONSTRAINT [UQ_Customers_Email] UNIQUE ([Email])
);
GO
CREATE NONCLUSTERED INDEX [IX_Customers_Name] ON [dbo].[Customers] ([Name]);
GO
