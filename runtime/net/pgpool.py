"""Opening a Postgres store, as every one of them does: the driver, the URL shown without
its password, connection settings, and the pool (NUL-safe text, closed with its owner).

The run store, the index and the memory store each open one; what differs between them
(their migrations, their error codes for a server that is down) stays theirs.
"""

from __future__ import annotations

import weakref
from typing import Any

from runtime.errors import StoreError
from runtime.net import pgtext
from runtime.net.pgurl import display


def drivers(what: str) -> tuple[Any, Any]:
    """(psycopg, psycopg_pool), or STORE_DRIVER_MISSING saying how to install them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            f"a postgresql:// {what} needs psycopg 3 and psycopg-pool ({exc}):"
            " pip install 'step-runtime[postgres]'",
            code="STORE_DRIVER_MISSING",
        ) from exc
    return psycopg, psycopg_pool


def shown(url: str, what: str) -> str:
    """The URL as messages show it (password hidden), or STORE_URL_INVALID."""
    try:
        return display(url)
    except ValueError as exc:  # a port that is not a number
        raise StoreError(f"{what}: {exc}", code="STORE_URL_INVALID") from exc


def connect_args(timeout: float) -> dict[str, Any]:
    """The libpq settings every connection of a store uses."""
    return {"connect_timeout": max(1, int(timeout)), "application_name": "step-runtime"}


def open_pool(owner: object, url: str, *, size: int, timeout: float, name: str) -> Any:
    """A psycopg pool of autocommit connections that escape NUL (runtime/net/pgtext.py),
    closed when `owner` is dropped: a pool left to the garbage collector may be collected on
    one of its own threads, which cannot join itself."""
    import psycopg_pool

    pool = psycopg_pool.ConnectionPool(
        url,
        min_size=1,
        max_size=max(1, size),
        kwargs={"autocommit": True, **connect_args(timeout)},
        timeout=timeout,
        open=True,
        name=name,
        configure=pgtext.install,
    )
    weakref.finalize(owner, pool.close)
    return pool
