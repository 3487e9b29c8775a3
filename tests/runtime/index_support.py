"""Shared by the search tests: a small tree of files written and indexed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.retrieval.indexer import index_paths
from runtime.retrieval.nodestore import open_store


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Write files (relative path -> text) under root, making folders as needed."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def index_tree(root: Path, files: dict[str, str], repository: str, db: Path) -> Any:
    """write_tree, then index root as repository into a new store at db."""
    write_tree(root, files)
    store = open_store(str(db), create=True)
    index_paths(store, [str(root)], repository=repository)
    return store
