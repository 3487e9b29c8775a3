-- Release 2: one row per captured payment, written by dbo.usp_CapturePayment.
CREATE TABLE dbo.PaymentAudit (
    Id         INT IDENTITY(1, 1) PRIMARY KEY,
    PaymentId  INT            NOT NULL REFERENCES dbo.Payments (Id),
    OrderId    INT            NOT NULL REFERENCES dbo.Orders (Id),
    Amount     DECIMAL(18, 2) NOT NULL,
    Provider   VARCHAR(40)    NOT NULL,
    CapturedAt DATETIME2      NOT NULL
);
GO
