"""The node model: a node, its id, the scope a caller may see, and the store protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


def meta_token(prefix: str, value: str) -> str:
    """A hidden FTS token for an attribute value (hex keeps any value one token)."""
    return f"zz{prefix}{value.encode().hex()}"


@dataclass(frozen=True)
class Scope:
    """What a caller may see: a repository, a snapshot and allowed security labels."""

    repository: str | None = None
    snapshot: str | None = None
    allowed_labels: tuple[str, ...] | None = None  # None: only unlabelled nodes are visible


@dataclass
class Node:
    """One indexed node."""

    id: str
    repository: str
    snapshot: str
    kind: str
    name: str
    qualified_name: str
    path: str
    language: str
    start_line: int = 0
    end_line: int = 0
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


def node_id(repository: str, snapshot: str, kind: str, qualified_name: str) -> str:
    """The stable, readable id `<repository>::<snapshot>::<kind>::<qualified name>`."""
    return f"{repository}::{snapshot}::{kind}::{qualified_name}"


class NodeStore(Protocol):
    """What actions and the indexer need (a server-backed store implements the same)."""

    def search(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        search_type: str = "bm25",
        filters: dict[str, Any] | None = None,
        rrf_k: int = 60,
    ) -> list[dict[str, Any]]:
        """Ranked hits `{id, score, rank, path, kind, name}`."""

    def get_nodes(self, ids: Sequence[str], *, scope: Scope) -> dict[str, Node]:
        """The visible nodes among ids."""

    def edges(
        self,
        ids: Sequence[str],
        *,
        scope: Scope,
        direction: str = "out",
        edge_types: Sequence[str] | None = None,
    ) -> list[tuple[str, str, str]]:
        """(from, to, type) edges touching ids whose other end is visible."""
