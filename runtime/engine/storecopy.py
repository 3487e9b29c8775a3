"""`runtime store copy`: a run store moved between SQLite and Postgres, verified (issue 34).

Every table of the run store is copied row for row into a target that holds no runs, in
one transaction of the target; before it commits, each table is read back from both
sides in primary-key order and compared by row count and SHA-256 of its rows (values in
one canonical form: text as UTF-8, bytes as hex, numbers as JSON). A copy that differs
in any table is rolled back and refused (STORE_COPY_MISMATCH), naming the table.
Variables keep the order they were first set in (SQLite's rowid, Postgres' `ord`).

The index half (nodes, edges, vectors, memories) is another copier with the same shape,
registered in COPIERS by the index's module (`runtime store copy --what index`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runtime.engine import pgstore
from runtime.errors import StoreError
from runtime.net import pgtext

# What `runtime store copy --what` can copy: name -> "module:function" taking
# (source, target) and returning a CopyReport. The index's copier is added by its module.
COPIERS: dict[str, str] = {
    "runs": "runtime.engine.storecopy:copy_run_store",
    "index": "runtime.engine.indexcopy:copy_index",  # issue 34, the index half
    "memories": "runtime.engine.memorycopy:copy_memories",  # issue 34, memories and values
}

# Tables in an order that inserts nothing before what it names; run_pointers_pending
# last: inserting run_pointers marks every row pending (the m006 trigger), and the
# source's own marks then replace those.
TABLES = [t for t in pgstore.TABLES if t != "run_pointers_pending"] + ["run_pointers_pending"]
BATCH = 1000


@dataclass
class TableCheck:
    """One table's rows and digest on each side."""

    table: str
    rows: int
    sha256: str
    target_rows: int
    target_sha256: str

    @property
    def ok(self) -> bool:
        """Whether the target holds exactly the source's rows."""
        return (self.rows, self.sha256) == (self.target_rows, self.target_sha256)


@dataclass
class CopyReport:
    """What a copy moved, table by table, and whether every table verified."""

    source: str
    target: str
    tables: list[TableCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every table verified."""
        return all(t.ok for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`--json`)."""
        return {
            "source": self.source,
            "target": self.target,
            "ok": self.ok,
            "tables": [
                {"table": t.table, "rows": t.rows, "sha256": t.sha256, "ok": t.ok}
                for t in self.tables
            ],
        }


def _canonical(row: Iterable[Any]) -> bytes:
    out = []
    for value in row:
        if isinstance(value, (bytes, bytearray, memoryview)):
            out.append({"b": bytes(value).hex()})
        else:
            out.append(value)
    return (
        json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        + b"\n"
    )


class _Side:
    """One end of a copy: a SQLite file or a Postgres database, opened as a run store."""

    def __init__(self, location: str, create: bool) -> None:
        from runtime.engine.stores import open_run_store

        store = open_run_store(location, create=create)  # migrated to the current schema
        self.where = store.path
        self.postgres = pgstore.is_url(location)
        if self.postgres:
            import psycopg

            store.close()
            self.conn: Any = psycopg.connect(location)  # one transaction until commit
            pgtext.install(self.conn)  # NUL characters round-trip (runtime/net/pgtext.py)
        else:
            store.close()
            self.conn = sqlite3.connect(location, isolation_level=None)
            self.conn.execute("BEGIN IMMEDIATE")

    def sql(self, text: str) -> str:
        return text.replace("?", "%s") if self.postgres else text

    def columns(self, table: str) -> list[str]:
        if self.postgres:
            rows = self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema ="
                " current_schema() AND table_name = %s ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            return [r[0] for r in rows if r[0] != "ord"]
        return [r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")]

    def keys(self, table: str) -> list[str]:
        """The primary key's columns in order, as ORDER BY terms (text in byte order)."""
        if self.postgres:
            rows = self.conn.execute(
                "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_index i"
                " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
                " WHERE i.indrelid = %s::regclass AND i.indisprimary"
                " ORDER BY array_position(i.indkey::int2[], a.attnum)",
                (table,),
            ).fetchall()
            # byte order of text, as SQLite's BINARY collation: Postgres' "C" collation
            return [f'{r[0]} COLLATE "C"' if r[1] == "text" else r[0] for r in rows]
        info = [r for r in self.conn.execute(f"PRAGMA table_info({table})") if r[5]]
        return [r[1] for r in sorted(info, key=lambda r: r[5])]

    def rows(self, table: str, columns: list[str], order: str) -> Iterator[tuple[Any, ...]]:
        """The table's rows: `order` "insert" (the order variables were set in) or "key"."""
        cols = ", ".join(columns)
        if order == "insert" and table == "run_vars":
            by = "ord" if self.postgres else "rowid"
        else:
            by = ", ".join(self.keys(table))
        cur = self.conn.cursor()
        cur.execute(f"SELECT {cols} FROM {table} ORDER BY {by}")
        while True:
            batch = cur.fetchmany(BATCH)
            if not batch:
                return
            yield from batch

    def insert(self, table: str, columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
        cols = ", ".join(columns)
        if self.postgres:
            with self.conn.cursor().copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("?" * len(columns))
            self.conn.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)

    def digest(self, table: str, columns: list[str]) -> tuple[int, str]:
        h = hashlib.sha256()
        n = 0
        for row in self.rows(table, columns, "key"):
            h.update(_canonical(row))
            n += 1
        return n, h.hexdigest()

    def count(self, table: str) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def commit(self) -> None:
        self.conn.execute("COMMIT") if not self.postgres else self.conn.commit()

    def close(self) -> None:
        if self.postgres:
            self.conn.rollback()  # nothing, after a commit
        else:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        self.conn.close()


# A test's hook: a function (table, row) -> row applied to what is written (a damaged copy).
_damage: Callable[[str, tuple[Any, ...]], tuple[Any, ...]] | None = None


def copy_run_store(source: str, target: str) -> CopyReport:
    """Copy every table of a run store into one holding no runs; verified, else refused."""
    errors = _driver_errors()
    try:
        src = _Side(source, create=False)
    except errors as exc:
        raise StoreError(f"store copy: {source}: {exc}") from exc
    try:
        dst = _Side(target, create=True)
    except BaseException:
        src.close()
        raise
    report = CopyReport(src.where, dst.where)
    try:
        if dst.count("runs"):
            raise StoreError(
                f"store copy: {dst.where} already holds runs; copy into an empty store",
                code="STORE_COPY_TARGET_NOT_EMPTY",
            )
        for table in TABLES:
            columns = src.columns(table)
            if table == "run_pointers_pending":  # the trigger's marks, replaced by the source's
                dst.conn.execute("DELETE FROM run_pointers_pending")
            written = src.rows(table, columns, "insert")
            if _damage is not None:
                written = (_damage(table, r) for r in written)
            dst.insert(table, columns, written)
        for table in TABLES:
            columns = src.columns(table)
            rows, digest = src.digest(table, columns)
            target_rows, target_digest = dst.digest(table, columns)
            report.tables.append(TableCheck(table, rows, digest, target_rows, target_digest))
        refuse_mismatch(report, dst.where)
        dst.commit()
    except errors as exc:
        raise StoreError(f"store copy: {dst.where}: {exc}; nothing was copied") from exc
    finally:
        src.close()
        dst.close()
    return report


def refuse_mismatch(report: CopyReport, where: str) -> None:
    """STORE_COPY_MISMATCH naming the first table whose copy differs from its source."""
    bad = [t for t in report.tables if not t.ok]
    if bad:
        first = bad[0]
        raise StoreError(
            f"store copy: {where}: table {first.table} differs from the source "
            f"({first.target_rows} rows, sha256 {first.target_sha256[:16]}; the source: "
            f"{first.rows} rows, {first.sha256[:16]}); nothing was copied",
            code="STORE_COPY_MISMATCH",
        )


def _driver_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [sqlite3.Error, UnicodeError]
    try:
        import psycopg

        found.append(psycopg.Error)
    except ImportError:
        pass
    return tuple(found)


def copier(what: str) -> Callable[[str, str], Any]:
    """The copy function registered for `what` ("runs", or "index" once its module adds it)."""
    import importlib

    spec = COPIERS.get(what)
    if spec is None:
        raise StoreError(
            f"store copy: nothing copies {what!r} (known: {', '.join(sorted(COPIERS))})",
            code="USAGE",
        )
    module, name = spec.split(":")
    found: Callable[[str, str], Any] = getattr(importlib.import_module(module), name)
    return found
