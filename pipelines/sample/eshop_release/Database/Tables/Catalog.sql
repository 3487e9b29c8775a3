-- Products, stock, baskets, payments and the order audit trail.
CREATE TABLE dbo.Products (
    Id    INT             IDENTITY (1, 1) NOT NULL PRIMARY KEY,
    Sku   VARCHAR (40)    NOT NULL UNIQUE,
    Name  NVARCHAR (200)  NOT NULL,
    Price DECIMAL (18, 2) NOT NULL
);
GO
CREATE TABLE dbo.Inventory (
    ProductId INT NOT NULL PRIMARY KEY REFERENCES dbo.Products (Id),
    OnHand    INT NOT NULL,
    Reserved  INT NOT NULL CONSTRAINT DF_Inventory_Reserved DEFAULT (0),
    CONSTRAINT CK_Inventory_Reserved CHECK (Reserved <= OnHand)
);
GO
CREATE TABLE dbo.Baskets (
    Id         INT IDENTITY (1, 1) NOT NULL PRIMARY KEY,
    CustomerId INT NOT NULL REFERENCES dbo.Customers (Id)
);
GO
CREATE TABLE dbo.BasketItems (
    BasketId  INT             NOT NULL REFERENCES dbo.Baskets (Id),
    ProductId INT             NOT NULL REFERENCES dbo.Products (Id),
    Quantity  INT             NOT NULL,
    UnitPrice DECIMAL (18, 2) NOT NULL,
    PRIMARY KEY (BasketId, ProductId)
);
GO
CREATE TABLE dbo.Payments (
    Id         INT             IDENTITY (1, 1) NOT NULL PRIMARY KEY,
    OrderId    INT             NOT NULL REFERENCES dbo.Orders (Id),
    Amount     DECIMAL (18, 2) NOT NULL,
    Provider   VARCHAR (40)    NOT NULL,
    CapturedAt DATETIME2 (3)   NOT NULL DEFAULT (SYSUTCDATETIME())
);
GO
CREATE SEQUENCE dbo.InvoiceNumbers AS BIGINT START WITH 100000 INCREMENT BY 1;
GO
