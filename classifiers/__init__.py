"""Code understanding: classify, extract symbols and dependencies, resolve, compact.

classify(text, path=None) -> Classification(kind, language, confidence, reasons)
extract(text, path=None) -> Extraction(kind, language, symbols, dependencies)
resolve(extractions) -> [ResolvedEdge(from_qn, to_qn, edge_type)]
compact(text, language, budget_tokens=None, counter=None) -> str
"""

from __future__ import annotations

from classifiers.code_classifier import classify
from classifiers.compact import compact
from classifiers.model import Classification, Dependency, Extraction, ResolvedEdge, Symbol
from classifiers.resolver import resolve

__all__ = [
    "Classification",
    "Dependency",
    "Extraction",
    "ResolvedEdge",
    "Symbol",
    "classify",
    "compact",
    "extract",
    "resolve",
]


def extract(text: str, path: str | None = None) -> Extraction:
    """Symbols and dependencies of a C# or T-SQL text (other kinds: none)."""
    from classifiers import csharp, tsql

    c = classify(text, path)
    ex = Extraction(c.kind, c.language, path=path)
    if c.language == "dotnet":
        ex.symbols, ex.dependencies, ex.usings, _ = csharp.extract(text)
    elif c.language == "sql":
        ex.symbols, ex.dependencies = tsql.extract(text)
    return ex
