"""report.json, the terminal table, thresholds and the comparison with a baseline.

The keys of report.json are stable (docs/eval.md, "report.json"): a new key may be
added, none is renamed or removed without a new `version`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runtime.errors import UsageError
from runtime.eval import metrics

VERSION = 1
# Quality measures (0..1, higher is better): compared with a baseline, plotted, gated.
QUALITY = ("evidence_recall", "fact_coverage", "answer_contains", "tools_used", "within_max_tokens")
# Cost measures: reported with their means, not gated.
COST = ("tokens_in", "tokens_out", "latency_s", "steps", "model_calls")


def _by(runs: Iterable[Mapping[str, Any]], key: str) -> dict[Any, list[Mapping[str, Any]]]:
    out: dict[Any, list[Mapping[str, Any]]] = {}
    for r in runs:
        out.setdefault(r[key], []).append(r)
    return out


def summarise(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means of every measure over runs, a 95% interval over repeats, counts."""
    out: dict[str, Any] = {"runs": len(runs), "errors": sum(1 for r in runs if r["error"])}
    repeats = _by(runs, "repeat")
    for name in (*QUALITY, *COST):
        value = metrics.mean(r[name] for r in runs)
        per_repeat = [metrics.mean(r[name] for r in rs) for rs in repeats.values()]
        got = [x for x in per_repeat if x is not None]
        ci = metrics.interval(got) if len(got) == len(per_repeat) else None
        out[name] = {
            "mean": None if value is None else round(value, 6),
            "ci95": None if ci is None else [round(ci[0], 6), round(ci[1], 6)],
        }
    return out


def curves(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Quality against context size and against evidence position, as [x, mean] points."""
    sized = [r for r in runs if r["size"] is not None]
    placed = [r for r in runs if r["position"] is not None]
    rot = {}
    pos = {}
    for name in QUALITY:
        points = []
        for size, rs in sorted(_by(sized, "size").items()):
            m = metrics.mean(r[name] for r in rs)
            if m is not None:
                points.append([size, round(m, 6)])
        if points:
            rot[name] = points
        points = []
        order = {"start": 0, "middle": 1, "end": 2, "shuffled": 3}
        for p, rs in sorted(_by(placed, "position").items(), key=lambda kv: order[kv[0]]):
            m = metrics.mean(r[name] for r in rs)
            if m is not None:
                points.append([p, round(m, 6)])
        if points:
            pos[name] = points
    units = sorted({str(r["size_unit"]) for r in sized})
    return {"context_rot": {"unit": "/".join(units) or None, "points": rot}, "position": pos}


def build(
    runs: Sequence[dict[str, Any]],
    *,
    pipeline: str,
    cases_file: str,
    model: str,
    repeat: int,
) -> dict[str, Any]:
    """The report: every run, each case's summary, the aggregate and the curves."""
    cases = {cid: summarise(rs) for cid, rs in _by(runs, "case").items()}
    return {
        "version": VERSION,
        "pipeline": pipeline,
        "cases_file": cases_file,
        "model": model,
        "repeat": repeat,
        "quality_metrics": list(QUALITY),
        "cost_metrics": list(COST),
        "aggregate": summarise(runs),
        "cases": cases,
        "curves": curves(runs),
        "runs": list(runs),
        "thresholds": {},
        "regressions": [],
        "passed": True,
    }


def check_thresholds(report: dict[str, Any], minimums: Mapping[str, float | None]) -> list[str]:
    """Failures of the aggregate against minimums (e.g. evidence_recall 0.8); recorded too."""
    failures = []
    for name, floor in minimums.items():
        if floor is None:
            continue
        got = report["aggregate"][name]["mean"]
        report["thresholds"][name] = {
            "min": floor,
            "got": got,
            "ok": got is not None and got >= floor,
        }
        if got is None or got < floor:
            shown = "none measured" if got is None else f"{got:.3f}"
            failures.append(f"{name} {shown} is below the minimum {floor:.3f}")
    return failures


def load_baseline(path: str) -> dict[str, Any]:
    """A report.json of an earlier run; EVAL_BASELINE_INVALID when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--baseline {path}: {exc}", code="EVAL_BASELINE_INVALID") from exc
    if (
        not isinstance(data, dict)
        or data.get("version") != VERSION
        or not isinstance(data.get("cases"), dict)
        or not isinstance(data.get("aggregate"), dict)
    ):
        raise UsageError(
            f"--baseline {path}: not a runtime eval report.json (version {VERSION})",
            code="EVAL_BASELINE_INVALID",
        )
    return data


def _mean_of(summary: Any, name: str) -> float | None:
    if not isinstance(summary, Mapping):
        return None
    entry = summary.get(name)
    value = entry.get("mean") if isinstance(entry, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def compare(
    report: dict[str, Any], baseline: Mapping[str, Any], tolerance: float = 0.0
) -> list[dict[str, Any]]:
    """Each quality measure that dropped by more than tolerance, per case and overall."""
    found = []
    pairs = [("(all)", report["aggregate"], baseline["aggregate"])]
    pairs += [
        (cid, summary, baseline["cases"].get(cid))
        for cid, summary in sorted(report["cases"].items())
    ]
    for cid, new, old in pairs:
        for name in QUALITY:
            before, after = _mean_of(old, name), _mean_of(new, name)
            if before is None or after is None:
                continue
            if after < before - tolerance:
                found.append(
                    {
                        "case": cid,
                        "metric": name,
                        "baseline": before,
                        "current": after,
                        "delta": round(after - before, 6),
                    }
                )
    report["regressions"] = found
    # Not regressions, but not silent either: cases the baseline had and this run has not.
    report["baseline_cases_missing"] = sorted(set(baseline["cases"]) - set(report["cases"]))
    return found


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci(entry: Mapping[str, Any]) -> str:
    ci = entry.get("ci95")
    if ci is None:
        return _fmt(entry.get("mean"))
    return f"{_fmt(entry['mean'])} [{_fmt(ci[0])}, {_fmt(ci[1])}]"


def table(report: Mapping[str, Any], shown: Any = str) -> str:
    """The terminal table: a row per case, then the aggregate with 95% intervals."""
    head = ("case", "runs", "recall", "facts", "contains", "tools", "tok in", "tok out", "s", "err")
    rows = []
    for cid, s in report["cases"].items():
        rows.append(
            (
                shown(cid),
                str(s["runs"]),
                _fmt(s["evidence_recall"]["mean"]),
                _fmt(s["fact_coverage"]["mean"]),
                _fmt(s["answer_contains"]["mean"]),
                _fmt(s["tools_used"]["mean"]),
                _fmt(s["tokens_in"]["mean"], 0),
                _fmt(s["tokens_out"]["mean"], 0),
                _fmt(s["latency_s"]["mean"], 3),
                str(s["errors"]),
            )
        )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    a = report["aggregate"]
    lines.append("")
    lines.append(
        f"aggregate over {a['runs']} runs ({a['errors']} failed), mean [95% CI over repeats]:"
    )
    for name in (*QUALITY, *COST):
        if a[name]["mean"] is not None:
            lines.append(f"  {name:<18} {_ci(a[name])}")
    return "\n".join(lines)
