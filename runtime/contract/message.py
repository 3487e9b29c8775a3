"""An inbox message: the unit steps exchange (part of the action contract)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Message:
    """One inbox message; consumed once, FIFO, on entry to its target step."""

    id: str
    sender_step_id: str | None
    target_step_id: str
    topic: str
    payload: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Inverse of to_dict."""
        return cls(**dict(data))
