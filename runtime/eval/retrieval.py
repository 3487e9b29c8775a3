"""`runtime eval --retrieval`: the search step alone, per retrieval mode, on golden cases.

For each case and mode: a k-hit search (recall@k: the case is answered when an expected
node is one of the k hits or collapsed under one, as docs/retrieval.md counts it) and a
10-hit search (MRR and nDCG@10), under the cases' scope. Semantic and hybrid need stored
vectors and the embedder; a mode that cannot run is listed with its reason, not skipped
silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.errors import StepRuntimeError
from runtime.eval import metrics
from runtime.eval.cases import CaseFile
from runtime.eval.evidence import resolve_evidence

MODES = ("bm25", "semantic", "hybrid")
DEEP = 10


def _language(store: Any, ids: set[str]) -> str:
    marks = ",".join("?" * len(ids))
    rows = store.conn().execute(
        f"SELECT DISTINCT language FROM nodes WHERE id IN ({marks})", sorted(ids)
    )
    langs = sorted(str(r[0]) for r in rows)
    return langs[0] if len(langs) == 1 else "mixed"


def evaluate(
    store: Any, scope: Any, cases: CaseFile, modes: Sequence[str], k: int = 5
) -> dict[str, Any]:
    """Per mode: recall@k, MRR, nDCG@10 overall and by language, and each case's ranks."""
    golden = [
        (c, resolve_evidence(store, scope, c, containing=False)) for c in cases.cases if c.evidence
    ]
    out: dict[str, Any] = {"k": k, "cases": len(golden), "modes": {}}
    embedder = None
    for mode in modes:
        if mode != "bm25" and embedder is None:
            try:
                from runtime.retrieval.embeddings import default_embedder

                embedder = default_embedder()
                store.search(
                    "probe", scope=scope, top_k=1, search_type="semantic", embedder=embedder
                )
            except StepRuntimeError as exc:
                out["modes"][mode] = {"available": False, "reason": f"{exc.code}: {exc.message}"}
                continue
        rows = []
        for case, expected in golden:
            short = store.search(
                case.question, scope=scope, top_k=k, search_type=mode, embedder=embedder
            )
            deep = store.search(
                case.question, scope=scope, top_k=DEEP, search_type=mode, embedder=embedder
            )
            r_k = metrics.found_rank(short, expected)
            r_deep = metrics.found_rank(deep, expected)
            rows.append(
                {
                    "case": case.id,
                    "language": case.language or _language(store, set().union(*expected)),
                    "found_at": r_k,
                    "rank_in_10": r_deep,
                    "ndcg10": round(metrics.ndcg(deep, expected, DEEP), 6),
                    "first_hit": short[0]["id"] if short else None,
                }
            )
        out["modes"][mode] = {"available": True, **summary(rows), "cases": rows}
    return out


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """recall@k, MRR@10 and nDCG@10, overall and per language."""

    def of(rs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        n = len(rs)
        found = sum(1 for r in rs if r["found_at"] is not None)
        return {
            "n": n,
            "found": found,
            "recall": round(found / n, 6) if n else None,
            "mrr": round(sum(1 / r["rank_in_10"] for r in rs if r["rank_in_10"]) / n, 6)
            if n
            else None,
            "ndcg": round(sum(r["ndcg10"] for r in rs) / n, 6) if n else None,
        }

    by_lang: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_lang.setdefault(r["language"], []).append(r)
    return {"all": of(rows), "by_language": {k: of(v) for k, v in sorted(by_lang.items())}}


def table(result: dict[str, Any]) -> str:
    """The markdown table docs/retrieval.md prints: recall@k per language and overall, MRR, nDCG."""
    k = result["k"]
    langs = sorted(
        {lang for m in result["modes"].values() if m["available"] for lang in m["by_language"]}
    )
    head = f"| search | {' | '.join(f'{lang} recall@{k}' for lang in langs)} | all recall@{k} | MRR | nDCG@10 |"
    lines = [f"{result['cases']} cases", head, "|---" * (len(langs) + 4) + "|"]
    for mode, m in result["modes"].items():
        if not m["available"]:
            lines.append(f"| {mode} | not available: {m['reason']} |")
            continue

        def cell(s: dict[str, Any]) -> str:
            return f"{s['found']}/{s['n']} ({s['recall']:.0%})"

        per = [cell(m["by_language"][lang]) if lang in m["by_language"] else "-" for lang in langs]
        a = m["all"]
        lines.append(
            f"| {mode} | {' | '.join(per)} | {cell(a)} | {a['mrr']:.3f} | {a['ndcg']:.3f} |"
        )
    return "\n".join(lines)


def merge(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One result of several cases files' (each its own scope): rows pooled per mode."""
    if len(results) == 1:
        return results[0]
    out: dict[str, Any] = {
        "k": results[0]["k"],
        "cases": sum(r["cases"] for r in results),
        "modes": {},
    }
    for mode in results[0]["modes"]:
        parts = [r["modes"][mode] for r in results]
        down = [p for p in parts if not p["available"]]
        if down:
            out["modes"][mode] = down[0]
            continue
        rows = [row for p in parts for row in p["cases"]]
        out["modes"][mode] = {"available": True, **summary(rows), "cases": rows}
    return out
