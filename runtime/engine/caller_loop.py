"""The event loop of an `arun` caller, seen by the run's worker thread.

`Runner.arun` drives a run on a worker thread (`asyncio.to_thread`, which carries context
variables over); branch steps read the caller's loop here and schedule their branches as
tasks on it (actions/branches.py). Actions are synchronous, so each branch still runs
its steps on a thread of its own while its task awaits it.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

CALLER_LOOP: ContextVar[asyncio.AbstractEventLoop | None] = ContextVar(
    "step_runtime_caller_loop", default=None
)


def caller_loop() -> asyncio.AbstractEventLoop | None:
    """The running loop of the `arun` that started this run (None for a plain `run`)."""
    loop = CALLER_LOOP.get()
    return loop if loop is not None and loop.is_running() and not loop.is_closed() else None
