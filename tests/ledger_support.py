"""Helpers of the provenance-ledger tests: a stored run verified as `runtime verify` does."""

from __future__ import annotations

from typing import Any

import runtime


def open_and_verify(path: str, run_id: str, key: bytes | None) -> Any:
    """What `runtime verify` computes, without the command line."""
    store = runtime.open_run_store(str(path), create=False)
    try:
        return store.verify_ledger(run_id, key)
    finally:
        store.close()
