"""Where each stored value lies in a SQLite file: table, row, column and its bytes' offsets.

A reader of the file format (https://www.sqlite.org/fileformat2.html), enough for the
ledger's tamper test to change a stored value one byte at a time in the file itself, never
through SQL: it walks each table's b-tree from its root page (rowid tables and WITHOUT
ROWID ones, interior and leaf pages, overflow chains) and decodes each record's header, so
every column value of every row is known by the file offsets of its bytes. Indexes are
not walked: they hold copies of key columns, not the rows.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Value:
    """One stored column value and where its bytes are in the file."""

    table: str
    row: int  # the row's ordinal in the table's b-tree order
    column: str
    serial: int  # the record's serial type (1-6 int, 7 float, >=12 blob, >=13 text)
    offsets: list[int]  # file offsets of the value's bytes, in order
    key: tuple[object, ...]  # the row's decoded values by column (to select rows)

    @property
    def is_text(self) -> bool:
        return self.serial >= 13 and self.serial % 2 == 1


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = 0
    for k in range(9):
        byte = buf[i + k]
        if k == 8:
            return (value << 8) | byte, i + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i + k + 1
    raise AssertionError("unreachable")


def _size(serial: int) -> int:
    if serial in (0, 8, 9):
        return 0
    if 1 <= serial <= 6:
        return (1, 2, 3, 4, 6, 8)[serial - 1]
    if serial == 7:
        return 8
    return (serial - 12) // 2 if serial % 2 == 0 else (serial - 13) // 2


def _decode(serial: int, raw: bytes) -> object:
    if serial == 0:
        return None
    if serial in (8, 9):
        return serial - 8
    if 1 <= serial <= 6:
        return int.from_bytes(raw, "big", signed=True)
    if serial == 7:
        import struct

        return struct.unpack(">d", raw)[0]
    return raw.decode("utf-8", "replace") if serial % 2 else raw


class _File:
    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        size = int.from_bytes(self.data[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        self.usable = self.page_size - self.data[20]

    def page(self, n: int) -> int:
        return (n - 1) * self.page_size

    def payload(self, start: int, size: int, index: bool) -> list[int]:
        """File offsets of a cell's payload bytes starting at `start`, following overflow."""
        u = self.usable
        x = u - 35 if not index else ((u - 12) * 64 // 255) - 23
        if size <= x:
            return list(range(start, start + size))
        m = ((u - 12) * 32 // 255) - 23
        k = m + ((size - m) % (u - 4))
        local = k if k <= x else m
        offsets = list(range(start, start + local))
        nxt = int.from_bytes(self.data[start + local : start + local + 4], "big")
        while len(offsets) < size and nxt:
            base = self.page(nxt)
            take = min(u - 4, size - len(offsets))
            offsets.extend(range(base + 4, base + 4 + take))
            nxt = int.from_bytes(self.data[base : base + 4], "big")
        return offsets

    def cells(self, root: int) -> list[list[int]]:
        """Every row's payload offsets of the b-tree at `root`, in key order."""
        out: list[list[int]] = []
        self._walk(root, out)
        return out

    def _walk(self, n: int, out: list[list[int]]) -> None:
        base = self.page(n)
        head = base + (100 if n == 1 else 0)
        kind = self.data[head]
        count = int.from_bytes(self.data[head + 3 : head + 5], "big")
        interior = kind in (2, 5)
        pointers = head + (12 if interior else 8)
        for c in range(count):
            at = base + int.from_bytes(self.data[pointers + 2 * c : pointers + 2 * c + 2], "big")
            if kind == 5:  # interior table: child, rowid
                self._walk(int.from_bytes(self.data[at : at + 4], "big"), out)
                continue
            if kind == 2:  # interior index: child, then a row of its own
                self._walk(int.from_bytes(self.data[at : at + 4], "big"), out)
                size, i = _varint(self.data, at + 4)
                out.append(self.payload(i, size, True))
                continue
            size, i = _varint(self.data, at)
            if kind == 13:
                _, i = _varint(self.data, i)  # the rowid
            out.append(self.payload(i, size, kind == 10))
        if interior:
            self._walk(int.from_bytes(self.data[head + 8 : head + 12], "big"), out)


def values(path: Path, tables: list[str]) -> list[Value]:
    """Every column value of every row of these tables (the WAL checkpointed first)."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        roots: dict[str, tuple[int, list[str], bool]] = {}
        for name, root, sql in db.execute(
            "SELECT name, rootpage, sql FROM sqlite_master WHERE type = 'table'"
        ):
            if name not in tables:
                continue
            info = db.execute(f"PRAGMA table_info({name})").fetchall()
            without = "WITHOUT ROWID" in sql.upper()
            columns = [r[1] for r in info]
            if without:  # the primary key's columns first, then the others in order
                pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
                columns = pk + [c for c in columns if c not in pk]
            roots[name] = (root, columns, without)
    finally:
        db.close()
    f = _File(path)
    out: list[Value] = []
    for name in tables:
        root, columns, without = roots[name]
        for row, payload in enumerate(f.cells(root)):
            raw = bytes(f.data[o] for o in payload)
            header, i = _varint(raw, 0)
            serials = []
            while i < header:
                serial, i = _varint(raw, i)
                serials.append(serial)
            pos = header
            found = []
            for column, serial in zip(columns, serials, strict=False):
                size = _size(serial)
                found.append((column, serial, payload[pos : pos + size], raw[pos : pos + size]))
                pos += size
            key = tuple(_decode(s, r) for _, s, _, r in found)
            out.extend(Value(name, row, c, s, offs, key) for c, s, offs, _ in found)
    return out
