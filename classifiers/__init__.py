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


def extract(text: str, path: str | None = None, *, detail: bool = True) -> Extraction:
    """Symbols and dependencies of a C# or T-SQL text (other kinds: none).

    detail=False (the indexer): the language is decided with the least evidence
    (code_classifier.language_only) and a C# file's kind is DOTNET_WITH_SQL when its
    extraction found SQL it uses, instead of classify()'s regex count of SQL literals.
    """
    from classifiers import csharp, tsql
    from classifiers.code_classifier import language_only

    if detail:
        c = classify(text, path)
        kind, language = c.kind, c.language
    else:
        language = language_only(text, path)
        kind = {"dotnet": "DOTNET", "sql": "SQL"}.get(language, "UNKNOWN")
    ex = Extraction(kind, language, path=path)
    if language == "dotnet":
        ex.symbols, ex.dependencies, ex.usings, _ = csharp.extract(text)
        if not detail and any(d.edge_type == "UsesSql" for d in ex.dependencies):
            ex.kind = "DOTNET_WITH_SQL"
    elif language == "sql":
        ex.symbols, ex.dependencies = tsql.extract(text, path)
    return ex
