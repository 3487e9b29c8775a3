:r C:\Data\git\tSQLt\tSQLt\Experiments\SQLCmdTest.1.1.sql

:r C:\Data\git\tSQLt\tSQLt\Experiments\SQLCmdTest.1.2.sql

GO

:r C:\Data\git\tSQLt\tSQLt\Experiments\SQLCmdTest.1.1.sql
GO
:!! echo something
:r C:\Data\git\tSQLt\tSQLt\Experiments\SQLCmdTest.1.2.sql
