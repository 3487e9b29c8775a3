"""The run store a --store value names: a SQLite file or a Postgres database (issue 34)."""

from __future__ import annotations

from runtime.engine.store import SqliteRunStore, default_path


def open_run_store(
    location: str | None = None,
    *,
    create: bool = True,
    durability: str = "normal",
    ledger: bool = True,
) -> SqliteRunStore:
    """The run store at a location: a SQLite file, or postgresql://... .

    None means $RUNTIME_STORE, else .runtime/runs.db. A Postgres store is the SQLite
    store's code over a connection pool (runtime/engine/pgstore.py, imported only then).
    """
    raw = location or default_path()
    if raw.startswith(("postgresql://", "postgres://")):
        from runtime.engine.pgstore import PostgresRunStore

        return PostgresRunStore(raw, create=create, durability=durability, ledger=ledger)
    return SqliteRunStore(raw, create=create, durability=durability, ledger=ledger)
