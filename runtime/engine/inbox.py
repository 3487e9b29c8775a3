"""The inbox: messages between steps, consumed FIFO and once on entry to their target."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.contract.message import Message
from runtime.engine.state import check_json


class Inbox:
    """Pending messages of one run, with deterministic ids."""

    def __init__(self, messages: list[Message] | None = None, seq: int = 0) -> None:
        self.messages: list[Message] = list(messages or [])
        self.seq = seq

    def enqueue(
        self,
        sender: str | None,
        target: str,
        topic: str,
        payload: Mapping[str, Any],
        attempt: int = 1,
    ) -> Message:
        """Add a message; the payload must be JSON."""
        data = dict(payload)
        check_json(data, f"inbox payload for {target!r}", sender)
        self.seq += 1
        msg = Message(f"m{self.seq}", sender, target, topic, data, attempt)
        self.messages.append(msg)
        return msg

    def consume(self, target: str) -> list[Message]:
        """Remove and return every message for a step, oldest first."""
        taken = [m for m in self.messages if m.target_step_id == target]
        if taken:
            self.messages = [m for m in self.messages if m.target_step_id != target]
        return taken

    def to_dict(self) -> dict[str, Any]:
        """JSON form for checkpoints."""
        return {"seq": self.seq, "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inbox:
        """Inverse of to_dict."""
        return cls(
            [Message.from_dict(m) for m in data.get("messages", [])], int(data.get("seq", 0))
        )
