"""The StepContext the engine hands to an action: reads see the run, writes are staged.

Writes, inbox sends and counter changes are applied only when the action
returns; a failed attempt leaves the run exactly as it was, so a retry or a
catch starts from clean state (Amazon States Language semantics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from runtime.contract.action import ENGINE_OWNED
from runtime.contract.message import Message
from runtime.engine.inbox import Inbox
from runtime.engine.state import RunState, check_json
from runtime.errors import StateError

if TYPE_CHECKING:
    from runtime.engine.services import Services
    from runtime.engine.trace import Tracer
    from runtime.format.pipeline import Pipeline, Step

_MISSING: Any = ...
_DELETED = object()


class Context:
    """One attempt of one step visit."""

    def __init__(
        self,
        *,
        run_id: str,
        step: Step,
        pipeline: Pipeline,
        state: RunState,
        inbox: Inbox,
        messages: list[Message],
        services: Services,
        tracer: Tracer,
        inputs: Mapping[str, Any],
        attempt: int,
    ) -> None:
        self.run_id = run_id
        self.step_id = step.id
        self.step = step.config
        self.settings: Mapping[str, Any] = pipeline.settings
        self.inputs = inputs
        self.pipeline = pipeline
        self.messages = messages
        self.services = services
        self.attempt = attempt
        self._state = state
        self._inbox = inbox
        self._tracer = tracer
        self._writes: dict[str, Any] = {}
        self._sends: list[tuple[str, str, dict[str, Any], int]] = []
        self._counters: dict[str, int] = {}
        self._events: list[tuple[str, dict[str, Any]]] = []
        self.read: set[str] = set()

    # --- variables -----------------------------------------------------------
    def get(self, name: str, default: Any = _MISSING) -> Any:
        """Read a state variable; without a default a missing one raises VARIABLE_MISSING."""
        self.read.add(name)
        if name in self._writes:
            value = self._writes[name]
            if value is not _DELETED:
                return value
        elif name in self._state.variables:
            return self._state.variables[name]
        if default is _MISSING:
            raise StateError(
                f"step {self.step_id!r} reads variable {name!r}, which is not set",
                code="VARIABLE_MISSING",
                step_id=self.step_id,
            )
        return default

    def has(self, name: str) -> bool:
        """True when the state variable is set."""
        if name in self._writes:
            return self._writes[name] is not _DELETED
        return name in self._state.variables

    def set(self, name: str, value: Any) -> None:
        """Stage a write; engine-owned names raise STATE_PROTECTED."""
        if name in ENGINE_OWNED:
            raise StateError(
                f"step {self.step_id!r} may not overwrite engine-owned {name!r}",
                code="STATE_PROTECTED",
                step_id=self.step_id,
            )
        check_json(value, f"variable {name!r}", self.step_id)
        self._writes[name] = value

    def delete(self, name: str) -> None:
        """Stage removal of a variable."""
        if name in ENGINE_OWNED:
            raise StateError(
                f"step {self.step_id!r} may not delete engine-owned {name!r}",
                code="STATE_PROTECTED",
                step_id=self.step_id,
            )
        self._writes[name] = _DELETED

    # --- inbox ---------------------------------------------------------------
    def enqueue(self, target_step_id: str, topic: str, payload: Mapping[str, Any]) -> Message:
        """Stage a message to a step (payload must be JSON)."""
        data = dict(payload)
        check_json(data, f"inbox payload for {target_step_id!r}", self.step_id)
        self._sends.append((target_step_id, topic, data, 1))
        return Message("pending", self.step_id, target_step_id, topic, data, 1)

    def requeue(self, message: Message) -> Message:
        """Stage a consumed message's return to its target with attempt + 1."""
        self._sends.append(
            (message.target_step_id, message.topic, dict(message.payload), message.attempt + 1)
        )
        return Message(
            "pending",
            self.step_id,
            message.target_step_id,
            message.topic,
            dict(message.payload),
            message.attempt + 1,
        )

    # --- trace and counters --------------------------------------------------
    def trace(self, event: str, **data: Any) -> None:
        """Record a notable decision (kept even if the attempt fails)."""
        check_json(data, f"trace event {event!r}", self.step_id)
        self._tracer.emit(event, self.step_id, attempt=self.attempt, **data)

    def counter(self, name: str) -> int:
        """Read an engine-owned counter."""
        return self._counters.get(name, self._state.counters.get(name, 0))

    def increment(self, name: str) -> int:
        """Stage a counter increment and return the new value."""
        value = self.counter(name) + 1
        self._counters[name] = value
        return value

    # --- engine side ---------------------------------------------------------
    def commit(self) -> tuple[list[str], list[Message]]:
        """Apply staged changes; return written names and sent messages."""
        variables = self._state.variables
        for name, value in self._writes.items():
            if value is _DELETED:
                variables.pop(name, None)
            else:
                variables[name] = value
        self._state.counters.update(self._counters)
        sent = [
            self._inbox.enqueue(self.step_id, target, topic, payload, attempt)
            for target, topic, payload, attempt in self._sends
        ]
        return sorted(self._writes), sent
