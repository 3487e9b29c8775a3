"""`runtime trace --branches` and `--branch KEY`: a run's branches side by side in time, and
one branch run's own events (map and parallel steps, docs/parallel.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime.errors import UsageError

BAR = 40  # characters for the longest visit's span


def branch_events(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's BRANCH events, in the order they were traced."""
    return [e for e in events if e.get("type") == "BRANCH"]


def timeline(events: list[dict[str, Any]]) -> str:
    """Each branch step visit's branches as bars on one time axis (ms from the visit's start)."""
    branches = branch_events(events)
    if not branches:
        return "no branches: this run has no map or parallel step that ran\n"
    visits: list[tuple[str, list[dict[str, Any]]]] = []
    for e in branches:
        # a visit's branches are traced together, after each other; a new visit of the same
        # step restarts at a branch key seen before
        step = str(e.get("step_id"))
        if (
            visits
            and visits[-1][0] == step
            and e["branch"] not in {b["branch"] for b in visits[-1][1]}
        ):
            visits[-1][1].append(e)
        else:
            visits.append((step, [e]))
    out: list[str] = []
    for step, group in visits:
        end = max(float(b.get("ended_ms") or 0.0) for b in group) or 1.0
        width = max(len(str(b["branch"])) for b in group)
        out.append(f"step {step}: {len(group)} branch(es), {end:.1f} ms")
        for b in group:
            start, stop = float(b.get("started_ms") or 0.0), float(b.get("ended_ms") or 0.0)
            left = round(start / end * BAR)
            right = max(round(stop / end * BAR), left + 1)
            bar = " " * left + "#" * (right - left) + " " * (BAR - right)
            error = f" {b['error']}" if b.get("error") else ""
            out.append(
                f"  {str(b['branch']).ljust(width)} |{bar}| {start:8.1f}-{stop:8.1f} ms  "
                f"{b.get('status')}{error}  {b.get('run_id')}"
            )
    return "\n".join(out) + "\n"


def branch_runs(events: list[dict[str, Any]], key: str) -> list[str]:
    """The run ids of the branch `key` (its key, or STEP.KEY), in trace order; a coded usage
    error listing the branches when none is."""
    branches = branch_events(events)
    found = [
        str(e["run_id"])
        for e in branches
        if key in (str(e["branch"]), f"{e.get('step_id')}.{e['branch']}")
    ]
    if found:
        return found
    known = sorted({f"{e.get('step_id')}.{e['branch']}" for e in branches})
    listed = ", ".join(known[:20]) if known else "none: no map or parallel step ran"
    raise UsageError(f"no branch {key!r} in this run; its branches: {listed}")
