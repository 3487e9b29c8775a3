"""The memory store protocol: memories, experiences and values, recalled by relevance.

`assemble_context` (and anything else that recalls) reads through `MemoryStore`; the
embedded default is SQLite (runtime/retrieval/memories.py, which opens it: open_memory_store), beside the node index or in
a named file. A later store (Postgres) implements the same three searches.

Visibility follows the node store's rule (docs/retrieval.md, "Security labels"): an
item is returned only when every one of its labels is in the caller's allowed labels;
`labels=None` allows none, so only items stored with `labels: []` are visible. Every
item is written with an explicit `labels` list (a missing one is refused on write).
Scope: an item stored for a repository, snapshot or session is returned only to a
search whose scope names the same value or leaves that key out; an item stored without
one applies everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

# The kinds of item a store recalls.
KINDS = ("memory", "experience", "value")
# The axes an experience is searched on: its whole narrative, the strategy it tried,
# what surprised, and the root cause (lesson, outcome result and surprise).
AXES = ("full", "strategy", "surprise", "root_cause")
# Experience filters (the step's `filters`): each names one stored field.
EXPERIENCE_FILTERS = ("domain", "strategy", "outcome", "pipeline", "confidence_tier")
# Scope keys of a memory (and of a memories search).
SCOPE_KEYS = ("repository", "snapshot", "session")


@dataclass(frozen=True)
class Recalled:
    """One recalled item: what to show, how relevant, and where the whole lives."""

    id: str  # memory / experience / value id
    kind: str  # "memory" | "experience" | "value"
    text: str  # the text to show (an experience: its narrative, see experience_text)
    score: float  # relevance after boosts (importance, confidence, decay); higher is better
    fields: Mapping[str, Any] = field(default_factory=dict)  # every structured field
    labels: frozenset[str] = frozenset()
    location: str = ""  # "memory:ID", "experience:ID", "value:ID"


@runtime_checkable
class MemoryStore(Protocol):
    """What recalling needs (the SQLite store and any later one implement it)."""

    def search_memories(
        self,
        query: str,
        *,
        limit: int,
        scope: Mapping[str, str] | None = None,
        labels: frozenset[str] | None = None,
        now: datetime | None = None,
    ) -> list[Recalled]:
        """Memories for query, best first: unexpired, in scope, every label allowed."""
        ...

    def search_experiences(
        self,
        query: str,
        *,
        axis: str = "full",
        limit: int,
        filters: Mapping[str, str] | None = None,
        labels: frozenset[str] | None = None,
    ) -> list[Recalled]:
        """Experiences for query on one axis (AXES), best first, matching every filter."""
        ...

    def search_values(
        self, query: str, *, limit: int, labels: frozenset[str] | None = None
    ) -> list[Recalled]:
        """Values (the principles `runtime values rebuild` stored), best first."""
        ...


class EmptyMemoryStore:
    """A store with nothing in it: what a run reads when no memory file exists yet."""

    path: str | None = None

    def search_memories(
        self,
        query: str,
        *,
        limit: int,
        scope: Mapping[str, str] | None = None,
        labels: frozenset[str] | None = None,
        now: datetime | None = None,
    ) -> list[Recalled]:
        """No memories."""
        return []

    def search_experiences(
        self,
        query: str,
        *,
        axis: str = "full",
        limit: int,
        filters: Mapping[str, str] | None = None,
        labels: frozenset[str] | None = None,
    ) -> list[Recalled]:
        """No experiences."""
        return []

    def search_values(
        self, query: str, *, limit: int, labels: frozenset[str] | None = None
    ) -> list[Recalled]:
        """No values."""
        return []
