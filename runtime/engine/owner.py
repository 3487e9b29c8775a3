"""Which process runs a run, and whether that process is gone: a live run from a dead one.

A run's row says `running` from `exec` (or `resume`) until it finishes; a process
killed meanwhile (SIGKILL, a power cut, a closed laptop) leaves it so. The store
records the owner of a running run — host name, process id and the process's start
time — when the run is created and again when it is resumed. A `running` run whose
owner was on this host and whose process is gone (no such pid, a zombie, or a pid
reused by a process started at another time) was interrupted: `runtime runs` shows
it so, with the resume hint. A run owned by another host cannot be checked from here
and stays `running`; so does one recorded before owners were (no owner).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None (no /proc, no process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces and parentheses itself.
    return text[text.rfind(")") + 2 :].split()


def _started(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, Linux), or None where unknown."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 and fields[19].isdigit() else None


def this_process() -> dict[str, Any]:
    """The owner record of the current process."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": _started(pid)}


def is_gone(owner: Mapping[str, Any] | None) -> bool:
    """True only when the owner ran on this host and its process no longer runs."""
    if not owner or owner.get("host") != socket.gethostname():
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # the pid exists but is another user's: reused, or can't tell
        pass
    except OSError:
        return False
    fields = _proc_stat(pid)
    if fields and fields[0] == "Z":  # killed, not yet reaped by its parent
        return True
    # A pid reused by a later process: its start time is not the owner's.
    started, now = owner.get("started"), _started(pid)
    return started is not None and now is not None and now != started
