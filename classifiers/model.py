"""The data the classifiers produce: classifications, symbols, dependencies, resolved edges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("SQL", "DOTNET", "DOTNET_WITH_SQL", "UNKNOWN")
LANGUAGE_OF_KIND = {
    "SQL": "sql",
    "DOTNET": "dotnet",
    "DOTNET_WITH_SQL": "dotnet",
    "UNKNOWN": "unknown",
}
EDGE_TYPES = (
    "Calls",
    "Creates",
    "Inherits",
    "Implements",
    "References",
    "Injects",
    "UsesSql",
    "ReadsFrom",
    "WritesTo",
    "Executes",
    "FK",
    "On",
    "Uses",
    "Tests",
    "Aliases",
    "StoredOn",
    "History",
    "Principal",
    "MemberOf",
    "Login",
)


@dataclass(frozen=True)
class Classification:
    """What a text is: kind, language, confidence in [0, 1] and short reasons."""

    kind: str
    language: str
    confidence: float
    reasons: tuple[str, ...] = ()


@dataclass
class Symbol:
    """A named code object: a C# type or member, or a SQL object."""

    kind: str
    name: str
    qualified_name: str
    language: str
    start_line: int
    end_line: int
    signature: str = ""
    doc: str = ""
    text: str = ""
    parent: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Dependency:
    """A reference from a symbol to a name, not yet resolved to a symbol."""

    from_qualified_name: str
    to_name: str
    edge_type: str
    line: int = 0


@dataclass
class Extraction:
    """Everything extracted from one file."""

    kind: str
    language: str
    symbols: list[Symbol] = field(default_factory=list)
    dependencies: list[Dependency] = field(default_factory=list)
    path: str | None = None
    usings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResolvedEdge:
    """A dependency resolved to a symbol of the codebase."""

    from_qn: str
    to_qn: str
    edge_type: str
