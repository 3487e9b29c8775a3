"""What the indexer writes an index through (issue 34): one protocol, two backends.

`runtime index` and the git history (runtime/retrieval/indexer.py, git_history.py) speak
only this protocol; SqliteNodeStore (nodestore.py) and PostgresIndexWriter (pgwrite.py)
implement it, so incremental indexing (a changed file re-indexed, an unchanged one
skipped, a deleted one removed, names defined twice renamed) is one piece of code on both.

The rules every implementation keeps:
- batch() groups writes in one transaction: everything written inside commits together
  or not at all (a crash leaves the index as the last commit left it). A batch inside a
  batch joins it.
- Node ids are unique: a row whose id another node holds is INDEX_ERROR, never a silent
  replacement.
- replace_edges and replace_typed_edges make a snapshot's edges exactly the list given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from runtime.retrieval.nodestore import NodeRow

Key = tuple[str, str]  # (kind, qualified name) of a node


class IndexWriter(Protocol):
    """The writes (and the reads that decide them) of an indexing run."""

    path: str  # where the index is (a file, or a URL with its password hidden)
    rebuilt: bool  # an index of another layout was dropped when it was opened

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """One transaction around the writes inside."""

    # --- files -------------------------------------------------------------------
    def file_hashes(self, repository: str, snapshot: str) -> dict[str, str]:
        """path -> content hash of the files indexed for a repository snapshot."""

    def extractions(
        self, repository: str, snapshot: str, paths: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """path -> the stored extraction summary; all, or of paths."""

    def replace_file_rows(
        self,
        repository: str,
        snapshot: str,
        path: str,
        file_hash: str,
        rows: Sequence[NodeRow],
        extraction: bytes,
        *,
        known: bool = True,
    ) -> int:
        """Replace a file's nodes with rows and record its hash and extraction."""

    def delete_nodes(self, repository: str, snapshot: str, paths: Sequence[str]) -> set[Key]:
        """Remove the nodes of files (their file rows stay); the keys removed."""

    def delete_file(self, repository: str, snapshot: str, path: str) -> set[Key]:
        """Remove a file's nodes and its file row; the keys removed."""

    def rename_nodes(self, renames: Sequence[tuple[str, str]]) -> None:
        """Give nodes new ids ((old, new); an old id no node holds is skipped)."""

    # --- edges -------------------------------------------------------------------
    def edge_count(self, repository: str, snapshot: str) -> int:
        """Edges of a repository snapshot."""

    def typed_edges(
        self, repository: str, snapshot: str, edge_type: str
    ) -> list[tuple[str, str, str]]:
        """The snapshot's edges of one type."""

    def replace_edges(
        self, repository: str, snapshot: str, edges: Iterable[tuple[str, str, str]]
    ) -> int:
        """Make the snapshot's edges exactly these; their number."""

    def replace_typed_edges(
        self, repository: str, snapshot: str, edge_type: str, edges: Iterable[tuple[str, str]]
    ) -> int:
        """Make the snapshot's edges of one type exactly these (from, to) pairs."""

    # --- nodes outside any file (git commits) --------------------------------------
    def kind_nodes(self, repository: str, snapshot: str, kind: str) -> dict[str, str]:
        """qualified name -> metadata JSON of a snapshot's nodes of one kind."""

    def put_loose_rows(self, rows: Sequence[NodeRow]) -> int:
        """Write nodes that belong to no file."""

    def delete_kind_nodes(
        self, repository: str, snapshot: str, kind: str, qualified_names: Iterable[str]
    ) -> None:
        """Remove a snapshot's nodes of one kind by qualified name."""

    def path_nodes(
        self, repository: str, snapshot: str, skip_kinds: Iterable[str]
    ) -> dict[str, list[str]]:
        """path -> ids of the snapshot's nodes in that file, without the kinds skipped."""

    # --- vectors -------------------------------------------------------------------
    def nodes_without_vectors(
        self, repository: str, snapshot: str, model: str
    ) -> list[tuple[str, str, str, str, str]]:
        """(id, kind, name, qualified name, doc) of nodes without a vector of model."""

    def missing_vectors(self, repository: str, snapshot: str) -> dict[str, int]:
        """vector model -> nodes of the snapshot without a vector of it."""

    def put_vectors(self, model: str, vectors: dict[str, bytes]) -> None:
        """Store vectors by node id."""

    # --- roots and labels ------------------------------------------------------------
    def root_repositories(self, root: str) -> list[str]:
        """The repository names a tree (its absolute path) was indexed under, sorted."""

    def record_root(self, root: str, repository: str) -> None:
        """Remember that the tree at root is indexed as repository."""

    def repository_root(self, repository: str) -> str | None:
        """The root recorded for a repository."""

    def record_repository_root(self, repository: str, root: str) -> None:
        """Record (or change) a repository's root."""

    def labelled_nodes(self, repository: str, snapshot: str) -> int:
        """How many nodes of a repository snapshot carry labels."""


def open_writer(
    location: str | None = None,
    *,
    lock_wait: float = 600.0,
    on_wait: Callable[[str], None] | None = None,
) -> IndexWriter:
    """The index at a location opened for `runtime index` (created when missing): the
    SQLite file itself, or a PostgresIndexWriter for postgresql://... (which waits up to
    lock_wait seconds for another indexer of that database to finish, then INDEX_BUSY;
    on_wait(where) is told when it starts waiting)."""
    from runtime.retrieval.indexes import index_location, is_url

    where = index_location(location)
    if is_url(where):
        from runtime.retrieval.pgwrite import PostgresIndexWriter

        return PostgresIndexWriter(where, lock_wait=lock_wait, on_wait=on_wait)
    from runtime.retrieval.nodestore import SqliteNodeStore

    return SqliteNodeStore(where, create=True)
