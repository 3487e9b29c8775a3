import pyodbc


class Migrator:
    """Applies SQL files in order."""

    def __init__(self, dsn: str) -> None:
        self.conn = pyodbc.connect(dsn)

    def apply(self, sql: str) -> None:
        cur = self.conn.cursor()
        cur.execute("SELECT name FROM sys.tables WHERE name = ?", "Accounts")
        cur.execute(sql)
        self.conn.commit()
