"""The node index an --index value names: a SQLite file or a Postgres database (issue 34)."""

from __future__ import annotations

import os
from typing import Any

from runtime.net.pgurl import is_url

DEFAULT_PATH = ".runtime/index.db"


def index_location(location: str | None = None) -> str:
    """The location given, else $RUNTIME_INDEX, else .runtime/index.db."""
    return location or os.environ.get("RUNTIME_INDEX") or DEFAULT_PATH


def open_index(location: str | None = None, *, create: bool = False) -> Any:
    """The node index at a location: SqliteNodeStore for a file, PostgresNodeStore for
    postgresql://... (runtime/retrieval/pgindex.py, imported only then)."""
    where = index_location(location)
    if is_url(where):
        from runtime.retrieval.pgindex import PostgresNodeStore

        return PostgresNodeStore(where, create=create)
    from runtime.retrieval.nodestore import SqliteNodeStore

    return SqliteNodeStore(where, create=create)
