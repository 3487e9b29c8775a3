"""One `max_steps` budget shared by a run and its branches (map and parallel steps).

A branch run counts each of its steps against the budget its parent opened (what was left
of the parent's `max_steps` when the branch step started), nested branches against the same
one; a step over it fails its branch with MAX_STEPS_EXCEEDED. When the branches end, the
steps they took are added to the parent's count, so the parent's later steps have what is
left. Which branch meets an exhausted budget first depends on timing; the error is the same.
"""

from __future__ import annotations

import threading


class StepBudget:
    """A thread-safe countdown of steps."""

    __slots__ = ("_left", "_lock", "total", "used")

    def __init__(self, total: int) -> None:
        self.total = max(total, 0)
        self._left = self.total
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Count one step; False when none is left (the step must not run)."""
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            self.used += 1
            return True
