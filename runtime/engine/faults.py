"""Crash injection for the resume tests: SIGKILL this process at a named point of a run.

`STEP_RUNTIME_KILL_AT=checkpoint:3` kills the process (SIGKILL, nothing runs after it) as
it is about to write its third checkpoint, that is after the third step visit (or catch)
ran and before anything it did is checkpointed. `checkpoint:1` is a run killed before its
first checkpoint; the last one of a run is the final checkpoint (after RUN_COMPLETED or
RUN_FAILED was traced). Only tests set it: a real kill can land anywhere, and this makes
each point reachable on purpose (tests/runtime/test_kill_points.py).
"""

from __future__ import annotations

import os
import signal
import threading

from runtime.errors import UsageError

ENV = "STEP_RUNTIME_KILL_AT"
# STOP instead of KILL: the process pauses there (SIGSTOP) until a SIGCONT (issue 34: a
# worker paused past its lease must find its late writes refused).
SIGNAL_ENV = "STEP_RUNTIME_KILL_SIGNAL"
_SPEC = os.environ.get(ENV) or None
ARMED = _SPEC is not None  # read by the engine before calling reached()
_seen: dict[str, int] = {}
_lock = threading.Lock()


def _target() -> tuple[str, int]:
    point, _, nth = (_SPEC or "").partition(":")
    if not point or not (nth or "1").isdecimal() or int(nth or "1") < 1:
        raise UsageError(f"{ENV} must be POINT or POINT:N with N >= 1, got {_SPEC!r}")
    return point, int(nth or "1")


def reached(point: str) -> None:
    """Count a pass through `point`; SIGKILL the process on the pass the variable names."""
    if _SPEC is None:
        return
    target, nth = _target()
    if target != point:
        return
    with _lock:
        _seen[point] = n = _seen.get(point, 0) + 1
    if n == nth:
        stop = os.environ.get(SIGNAL_ENV, "").upper() in ("STOP", "SIGSTOP")
        os.kill(os.getpid(), signal.SIGSTOP if stop else signal.SIGKILL)
