"""The memories half of `runtime store copy FROM TO --what memories` (issue 34).

Copies a memory store SQLite -> Postgres or Postgres -> SQLite in one transaction of the
target: memories, experiences and values in the order they were stored (so ties break
alike on both sides), each record verified against its digest as it is read, with its
vector as stored (nothing is embedded again). The target's write path makes its own
full text (FTS5 rows, or Postgres' term rows). Before the commit each kind is read back
from both sides and compared by count and SHA-256: its records and digests, its vectors,
and its full-text terms (what searches rank by); a difference is STORE_COPY_MISMATCH
naming the table, and nothing is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from runtime.engine.storecopy import CopyReport, TableCheck, _canonical, refuse_mismatch
from runtime.errors import StoreError
from runtime.retrieval.memory_items import canonical

KINDS = ("memory", "experience", "value")
_TABLES = {"memory": "memories", "experience": "experiences", "value": "value_items"}

# A test's hook: a function (kind, record) -> record applied to what is written (a damaged copy).
_damage: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None


def _digest(rows: Iterable[tuple[Any, ...]]) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    for row in rows:
        h.update(_canonical(row))
        n += 1
    return n, h.hexdigest()


def _items(store: Any, kind: str) -> list[tuple[Any, ...]]:
    """A kind's records as comparable rows, by id (UTF-8 byte order on both sides)."""
    from runtime.retrieval.memory_items import digest

    rows = [
        (r["id"], canonical(r), digest(r), vec[0] if vec else None, vec[1] if vec else None)
        for _, r, vec in store.dump(kind)
    ]
    return sorted(rows, key=lambda r: str(r[0]).encode())


def _terms(store: Any, kind: str) -> list[tuple[Any, ...]]:
    return sorted(store.terms(kind), key=lambda r: (r[0].encode(), r[1].encode(), r[2]))


def copy_memories(source: str, target: str) -> CopyReport:
    """Copy a memory store into an empty one (SQLite <-> Postgres); verified, else refused."""
    from runtime.retrieval.memories import open_memory_store

    src = open_memory_store(source, embedder=None)
    if not hasattr(src, "dump"):
        raise StoreError(f"store copy: no memory store at {src.path}", code="MEMORY_STORE_ERROR")
    dst = open_memory_store(target, create=True, embedder=None)
    report = CopyReport(src.path, dst.path)
    try:
        if any(dst.counts().values()):
            raise StoreError(
                f"store copy: {dst.path} already holds memories; copy into an empty store",
                code="STORE_COPY_TARGET_NOT_EMPTY",
            )
        with dst.transaction():
            for kind in KINDS:
                items = src.dump(kind)
                records = [r if _damage is None else _damage(kind, r) for _, r, _ in items]
                vectors = {r["id"]: vec for _, r, vec in items if vec is not None}
                dst.put_records(kind, records, vectors)
            for kind in KINDS:
                for table, read in ((_TABLES[kind], _items), (f"{_TABLES[kind]} terms", _terms)):
                    rows, sha = _digest(read(src, kind))
                    target_rows, target_sha = _digest(read(dst, kind))
                    report.tables.append(TableCheck(table, rows, sha, target_rows, target_sha))
            refuse_mismatch(report, dst.path)
    finally:
        for store in (src, dst):
            if hasattr(store, "close"):
                store.close()
    return report
