"""Resolve dependencies by name within a codebase.

SQL names resolve case-insensitively on schema-qualified names (`dbo.Orders`),
then on the bare object name. C# names resolve on simple names; when several
symbols share a name, those in the file's namespace or `using` namespaces win.
A call that still matches several methods (an interface and its implementation)
links to each of them, at most three, so no real caller is dropped.
"""

from __future__ import annotations

import functools
from collections import defaultdict

from classifiers.model import Dependency, Extraction, ResolvedEdge, Symbol

SQL_EDGES = {"ReadsFrom", "WritesTo", "Executes", "FK", "On", "UsesSql"}
_TYPE_KINDS = {"class", "record", "struct", "interface", "enum"}
_MAX_TARGETS = 3


@functools.lru_cache(maxsize=16384)
def _enclosing(qualified_name: str) -> frozenset[str]:
    """Every namespace (or type) that encloses a name: `A.B.C.M` -> {A, A.B, A.B.C}."""
    parts = qualified_name.split(".")[:-1]
    return frozenset(".".join(parts[: i + 1]) for i in range(len(parts)))


def resolve(extractions: list[Extraction]) -> list[ResolvedEdge]:
    """Resolved edges for every dependency whose target is a symbol of the codebase."""
    sql_full: dict[str, str] = {}
    sql_bare: dict[str, list[str]] = defaultdict(list)
    cs_types: dict[str, list[Symbol]] = defaultdict(list)
    cs_members: dict[str, list[Symbol]] = defaultdict(list)
    for ex in extractions:
        for s in ex.symbols:
            if s.language == "sql":
                sql_full[s.qualified_name.lower()] = s.qualified_name
                sql_bare[s.qualified_name.split(".")[-1].lower()].append(s.qualified_name)
            elif s.kind in _TYPE_KINDS:
                cs_types[s.name].append(s)
            elif s.kind in ("method", "property", "constructor"):
                cs_members[s.name].append(s)
    edges: list[ResolvedEdge] = []
    # Files repeat the same names under the same usings: resolve each combination once.
    memo: dict[tuple[str, str, frozenset[str]], list[str]] = {}
    for ex in extractions:
        scopes = frozenset(ex.usings) | {
            s.qualified_name for s in ex.symbols if s.kind == "namespace"
        }
        for dep in ex.dependencies:
            key = (dep.edge_type, dep.to_name, scopes)
            found = memo.get(key)
            if found is None:
                found = memo[key] = _targets(dep, scopes, sql_full, sql_bare, cs_types, cs_members)
            for target in found:
                if target != dep.from_qualified_name:
                    edges.append(ResolvedEdge(dep.from_qualified_name, target, dep.edge_type))
    return list(dict.fromkeys(edges))


def _targets(
    dep: Dependency,
    scopes: frozenset[str],
    sql_full: dict[str, str],
    sql_bare: dict[str, list[str]],
    cs_types: dict[str, list[Symbol]],
    cs_members: dict[str, list[Symbol]],
) -> list[str]:
    if dep.edge_type in SQL_EDGES:
        name = dep.to_name.lower()
        if name in sql_full:
            return [sql_full[name]]
        bare = sql_bare.get(name.split(".")[-1], [])
        return bare if len(bare) == 1 else []
    pool = (
        cs_members.get(dep.to_name, [])
        if dep.edge_type == "Calls"
        else cs_types.get(dep.to_name, [])
    )
    if len(pool) > 1:
        # In scope: declared inside (or below) the file's namespace or one of its usings.
        scoped = [s for s in pool if not _enclosing(s.qualified_name).isdisjoint(scopes)]
        pool = scoped or pool
    return [s.qualified_name for s in pool[:_MAX_TARGETS]]
