-- Orders and their lines.
CREATE TABLE dbo.Orders (
    Id         INT            IDENTITY (1, 1) NOT NULL,
    CustomerId INT            NOT NULL,
    Status     TINYINT        NOT NULL CONSTRAINT DF_Orders_Status DEFAULT (0),
    CreatedAt  DATETIME2 (3)  NOT NULL CONSTRAINT DF_Orders_CreatedAt DEFAULT (SYSUTCDATETIME()),
    Total      DECIMAL (18, 2) NOT NULL CONSTRAINT DF_Orders_Total DEFAULT (0),
    CONSTRAINT PK_Orders PRIMARY KEY CLUSTERED (Id),
    CONSTRAINT FK_Orders_Customers FOREIGN KEY (CustomerId) REFERENCES dbo.Customers (Id),
    CONSTRAINT CK_Orders_Status CHECK (Status BETWEEN 0 AND 3)
);
GO
CREATE TABLE dbo.OrderLines (
    OrderId   INT             NOT NULL,
    ProductId INT             NOT NULL,
    Quantity  INT             NOT NULL,
    UnitPrice DECIMAL (18, 2) NOT NULL,
    CONSTRAINT PK_OrderLines PRIMARY KEY (OrderId, ProductId),
    CONSTRAINT FK_OrderLines_Orders FOREIGN KEY (OrderId) REFERENCES dbo.Orders (Id) ON DELETE CASCADE,
    CONSTRAINT FK_OrderLines_Products FOREIGN KEY (ProductId) REFERENCES dbo.Products (Id),
    CONSTRAINT CK_OrderLines_Quantity CHECK (Quantity > 0)
);
GO
CREATE NONCLUSTERED INDEX IX_Orders_CustomerId ON dbo.Orders (CustomerId) INCLUDE (Status, Total);
GO
CREATE TYPE dbo.OrderLineType AS TABLE (
    ProductId INT NOT NULL,
    Quantity  INT NOT NULL,
    UnitPrice DECIMAL (18, 2) NOT NULL
);
GO
