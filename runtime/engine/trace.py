"""Trace events: one per step and per notable decision, JSON data with a sequence number.

Timing lives only in `ts` and `duration_ms`, so two runs with the same inputs and
cassette give the same events once those keys are dropped (`without_timing`).

`ts` is wall-clock time in seconds since the epoch, read once when the tracer starts (a run
or a resume) and advanced by the monotonic clock: one cheap clock read per event, and the
timestamps of a run never go backwards even when the system clock is set back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

TIMING_KEYS = ("ts", "duration_ms", "latency_ms")
_clock = time.perf_counter


class Tracer:
    """Collects a run's events and forwards each to listeners."""

    def __init__(
        self, run_id: str, seq: int = 0, listeners: Iterable[Callable[[dict[str, Any]], None]] = ()
    ) -> None:
        self.run_id = run_id
        self.seq = seq
        self.pending: list[dict[str, Any]] = []
        self.listeners = list(listeners)
        # wall clock = monotonic clock + offset (the engine's loop builds STEP events itself)
        self.offset = time.time() - _clock()

    def emit(self, type_: str, step_id: str | None = None, **data: Any) -> dict[str, Any]:
        """Record one event."""
        self.seq += 1
        event = {
            "run_id": self.run_id,  # listeners shared by concurrent runs tell them apart
            "seq": self.seq,
            "type": type_,
            "step_id": step_id,
            "ts": self.offset + _clock(),
            **data,
        }
        self.pending.append(event)
        if self.listeners:
            for listener in self.listeners:
                listener(event)
        return event

    def drain(self) -> list[dict[str, Any]]:
        """Events not yet written to the store."""
        out, self.pending = self.pending, []
        return out


# What a STEP event's `wrote` holds for each written name: a number, boolean or null as the
# value itself (small, and what a reader of the trace wants to see); a string, list or object
# as a summary object (its size, not its content, which may be megabytes); a deleted variable
# as {"deleted": true}. A reader tells them apart by JSON type: only those are objects.
AS_VALUE: frozenset[type] = frozenset({int, bool, float, type(None)})


def summarize(value: Any) -> Any:
    """What `wrote` records for a value: a scalar itself, else its type and size (see AS_VALUE)."""
    if type(value) in AS_VALUE:  # the common case first: one lookup
        return value
    if isinstance(value, str):
        return {"type": "str", "chars": len(value)}
    if isinstance(value, list | tuple | dict):
        return {"type": type(value).__name__, "items": len(value)}
    return {"type": type(value).__name__, "value": value}  # a subclass of int or float


def without_timing(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with timing keys removed (for determinism checks)."""
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in events]


def to_jsonl(events: Iterable[dict[str, Any]]) -> str:
    """One JSON object per line."""
    return "".join(json.dumps(e, sort_keys=True) + "\n" for e in events)


# Keys shown in the columns, or (run_id) the same on every line of one run's listing.
_LISTED = ("run_id", "seq", "type", "step_id", "ts")


def render_text(events: Iterable[dict[str, Any]], *, width: int | None = 80) -> str:
    """A readable listing of events; each value cut to `width` characters (None: whole)."""
    lines = []
    for e in events:
        extra = {k: v for k, v in e.items() if k not in _LISTED}
        detail = " ".join(f"{k}={json.dumps(v)[:width]}" for k, v in extra.items())
        lines.append(f"{e['seq']:>5} {e['type']:<24} {e.get('step_id') or '-':<22} {detail}")
    return "\n".join(lines)
