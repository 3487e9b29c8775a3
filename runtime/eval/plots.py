"""The context-rot and position curves as PNG (matplotlib, the `eval` extra).

matplotlib is imported here only, with the Agg backend (no display needed); without it
the caller reports EVAL_PLOTS_UNAVAILABLE and writes the other outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

LABELS = {
    "evidence_recall": "evidence recall",
    "fact_coverage": "fact coverage",
    "answer_contains": "answer contains",
    "tools_used": "tools used",
    "within_max_tokens": "within max tokens",
}


def available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(title: str, xlabel: str) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean over runs")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _empty(ax: Any, what: str) -> None:
    ax.text(
        0.5,
        0.5,
        f"no {what} variants in these cases",
        ha="center",
        va="center",
        transform=ax.transAxes,
    )


def context_rot(curves: Mapping[str, Any], path: Path) -> None:
    """Quality against context size (k blocks or evidence tokens)."""
    rot = curves["context_rot"]
    fig, ax = _figure(
        "Context rot: quality vs context size", f"context size ({rot['unit'] or '-'})"
    )
    if rot["points"]:
        for name, points in rot["points"].items():
            xs = [p[0] for p in points]
            ax.plot(xs, [p[1] for p in points], marker="o", label=LABELS.get(name, name))
        if len({p[0] for pts in rot["points"].values() for p in pts}) > 2:
            ax.set_xscale("log")
        ax.legend(loc="lower left")
    else:
        _empty(ax, "k or tokens")
    fig.savefig(path, format="png")


def position(curves: Mapping[str, Any], path: Path) -> None:
    """Quality against where the evidence sat (start, middle, end, shuffled)."""
    pos = curves["position"]
    fig, ax = _figure("Position: quality vs evidence position", "evidence position")
    if pos:
        order = ["start", "middle", "end", "shuffled"]
        names = sorted({p[0] for pts in pos.values() for p in pts}, key=order.index)
        for name, points in pos.items():
            got = dict((p[0], p[1]) for p in points)
            ax.plot(
                [names.index(x) for x in names if x in got],
                [got[x] for x in names if x in got],
                marker="o",
                label=LABELS.get(name, name),
            )
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.legend(loc="lower left")
    else:
        _empty(ax, "position")
    fig.savefig(path, format="png")
