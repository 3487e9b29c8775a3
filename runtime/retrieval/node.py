"""The node model: a node, its id, the scope a caller may see, and the store protocol."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.errors import RunError
from runtime.governance.subject import name_problem


def meta_token(prefix: str, value: str) -> str:
    """A hidden FTS token for an attribute value (hex keeps any value one token)."""
    return f"zz{prefix}{value.encode().hex()}"


def label_set_token(labels_json: str) -> str:
    """The hidden FTS token naming a node's whole label set (its stored labels JSON): the
    default rule matches the tokens of the visible sets instead of excluding hidden labels."""
    return "zzq" + hashlib.sha256(labels_json.encode()).hexdigest()[:16]


def scope_value_problem(value: Any) -> str | None:
    """Why value cannot name a repository, snapshot or label, else None (one rule for
    scopes and subjects: runtime/governance/subject.py's name_problem)."""
    return name_problem(value)


@dataclass(frozen=True)
class Scope:
    """What a caller may see: a repository, a snapshot and allowed security labels.

    None means "not restricted" for repository and snapshot, and "no labels" for
    allowed_labels. Every value given is checked (SCOPE_INVALID), so no value can turn
    into "all" by being empty.
    """

    repository: str | None = None
    snapshot: str | None = None
    allowed_labels: tuple[str, ...] | None = None  # None: only unlabelled nodes are visible

    def __post_init__(self) -> None:
        given: list[tuple[str, Any]] = [
            ("repository", self.repository),
            ("snapshot", self.snapshot),
        ]
        given += [("allowed label", label) for label in self.allowed_labels or ()]
        for name, value in given:
            if value is None and name != "allowed label":
                continue
            problem = scope_value_problem(value)
            if problem:
                raise RunError(f"scope {name} {problem}", code="SCOPE_INVALID")


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
    # The text's token counts made when it was indexed: encoding -> (first cut, last cut,
    # tokens between them), under runtime.context.tokens.CUT_RULE. Empty: not counted.
    tokens: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the counts, which fetch_node_texts hands on with a digest)."""
        out = dict(self.__dict__)
        del out["tokens"]
        return out


def node_id(
    repository: str,
    snapshot: str,
    kind: str,
    qualified_name: str,
    *,
    at: str | None = None,
    occurrence: int = 1,
) -> str:
    """The stable, readable id `<repository>::<snapshot>::<kind>::<qualified name>`.

    A kind and qualified name defined more than once in a snapshot (a partial class, a
    table created in two scripts) has no such id: each definition is `...@<path>` (at), and
    the n-th one in the same file (n >= 2) `...@<path>#<n>` (occurrence).
    """
    plain = f"{repository}::{snapshot}::{kind}::{qualified_name}"
    if at is None:
        return plain
    return f"{plain}@{at}" if occurrence == 1 else f"{plain}@{at}#{occurrence}"


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
        rrf_k: int = 5,
        per_file: int = 2,
    ) -> list[dict[str, Any]]:
        """Ranked hits `{id, score, rank, path, kind, name}` (and `children`: the child
        nodes folded into a hit), scores never rising down the list; per_file: hits of one
        file before its further hits are ranked down (0: no cap)."""

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
