
GO
--> /*--FILENAME--*/
GO
