"""The StepContext the engine hands to an action: reads see the run, writes are staged.

Writes, inbox sends and counter changes are applied only when the action
returns; a failed attempt leaves the run exactly as it was, so a retry or a
catch starts from clean state (Amazon States Language semantics).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from runtime.contract.action import ENGINE_OWNED
from runtime.contract.message import Message
from runtime.engine.inbox import Inbox
from runtime.engine.state import JSON_SCALARS, RunState, check_json
from runtime.errors import StateError

if TYPE_CHECKING:
    from runtime.context.fidelity import HistoryLog
    from runtime.engine.services import Services
    from runtime.engine.trace import Tracer
    from runtime.format.pipeline import Pipeline

_MISSING: Any = ...
NO_ARRIVAL: Mapping[str, str] = MappingProxyType({})  # the entry step's, a short form's
_DELETED = object()


class Context:
    """One attempt of one step visit.

    The engine keeps one Context per run and resets it for each attempt (`begin`), so a
    step costs no new object; an action must not keep its ctx after `run` returns.
    """

    __slots__ = (
        "_counters",
        "_deleted",
        "_inbox",
        "_no_messages",
        "_sends",
        "_state",
        "_thread_appends",
        "_tracer",
        "_writes",
        "arrival",
        "arrival_from",
        "attempt",
        "history_log",
        "inputs",
        "messages",
        "pipeline",
        "read",
        "resumed",
        "run_id",
        "sent",
        "services",
        "settings",
        "step",
        "step_id",
    )

    def __init__(
        self,
        *,
        run_id: str,
        pipeline: Pipeline,
        state: RunState,
        inbox: Inbox,
        services: Services,
        tracer: Tracer,
        inputs: Mapping[str, Any],
    ) -> None:
        self.run_id = run_id
        self.settings: Mapping[str, Any] = pipeline.settings
        self.inputs = inputs
        self.pipeline = pipeline
        self.services = services
        self._state = state
        self._inbox = inbox
        self._tracer = tracer
        self._writes: dict[str, Any] = {}
        self._sends: list[tuple[str, str, dict[str, Any], int]] = []
        self._counters: dict[str, int] = {}
        self._deleted = False
        self._no_messages: list[Message] = []
        self.read: set[str] = set()
        self.sent: Sequence[Message] = ()  # the messages the last commit enqueued
        # The transition taken into the current step: its long-form attributes (fidelity,
        # thread_id) and the step it came from. The engine sets both before each visit.
        self.arrival: Mapping[str, str] = NO_ARRIVAL
        self.arrival_from: str | None = None
        # Completed steps from the trace (set by the engine when an action reads history) and
        # whether this process resumed the run (cleared by mark_resume_handled's commit).
        self.history_log: HistoryLog | None = None
        self.resumed = False
        self._thread_appends: list[tuple[str, list[dict[str, Any]]]] | None = None
        self.begin("", {}, [], 1)

    def begin(
        self, step_id: str, config: Mapping[str, Any], messages: list[Message], attempt: int
    ) -> None:
        """Start an attempt: nothing staged, nothing read."""
        self.step_id = step_id
        self.step = config
        if not messages:  # one empty list serves every step without messages...
            messages = self._no_messages
            if messages:  # ...unless an action appended to it
                messages = self._no_messages = []
        self.messages = messages
        self.attempt = attempt
        # The containers are reused, emptied here: a failed attempt's staged changes never
        # reach the next attempt or step (commit hands on copies, never the containers).
        if self._writes:
            self._writes.clear()
            self._deleted = False
        if self._sends:
            self._sends.clear()
        if self._counters:
            self._counters.clear()
        if self.read:
            self.read.clear()
        self._thread_appends = None

    # --- variables -----------------------------------------------------------
    def get(self, name: str, default: Any = _MISSING) -> Any:
        """Read a state variable; without a default a missing one raises VARIABLE_MISSING."""
        self.read.add(name)
        writes = self._writes
        if writes and name in writes:
            value = writes[name]
            if value is not _DELETED:
                return value
        else:
            value = self._state.variables.get(name, _MISSING)  # no JSON value is `...`
            if value is not _MISSING:
                return value
        if default is _MISSING:
            raise StateError(
                f"step {self.step_id!r} reads variable {name!r}, which is not set",
                code="VARIABLE_MISSING",
                step_id=self.step_id,
            )
        return default

    def variables(self) -> Mapping[str, Any]:
        """A read-only view of the committed variables (for preambles; reads are not tracked)."""
        return MappingProxyType(self._state.variables)

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
        if type(value) not in JSON_SCALARS:  # the message is built only for a value that fails
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
        self._deleted = True

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

    def increment(self, name: str, by: int = 1) -> int:
        """Stage a counter increment (by `by`) and return the new value."""
        value = self.counter(name) + by
        self._counters[name] = value
        return value

    # --- history and threads (docs/fidelity.md) -------------------------------
    def history(self) -> list[dict[str, Any]]:
        """The run's completed step visits so far (id, action, outcome, duration, attempts, notes)."""
        log = self.history_log
        return [r.to_dict() for r in log.records] if log is not None else []

    def thread(self, thread_id: str) -> list[dict[str, Any]]:
        """A copy of a conversation thread's messages (committed ones; [] for a new thread)."""
        return [dict(m) for m in self._state.threads.get(thread_id, ())]

    def append_thread(self, thread_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Stage messages to append to a thread (applied when the attempt succeeds)."""
        data = [dict(m) for m in messages]
        check_json(data, f"thread {thread_id!r}", self.step_id)
        if self._thread_appends is None:
            self._thread_appends = []
        self._thread_appends.append((thread_id, data))

    def mark_resume_handled(self) -> None:
        """Stage the end of the after-resume state (the one degraded `full` step has run)."""
        if self._thread_appends is None:
            self._thread_appends = []
        self._thread_appends.append(("", []))  # "" marks the resume handled; no thread is ""

    # --- engine side ---------------------------------------------------------
    def commit(self) -> Collection[str]:
        """Apply staged changes; return the written names, sorted (sent messages: `sent`)."""
        writes = self._writes
        if writes:
            variables = self._state.variables
            if self._deleted:
                for name, value in writes.items():
                    if value is _DELETED:
                        variables.pop(name, None)
                    else:
                        variables[name] = value
            else:
                variables.update(writes)
            # One name needs no sorting and no list: the dict itself is handed on (emptied
            # by the next begin(), after the engine has read it).
            names: Collection[str] = writes if len(writes) == 1 else sorted(writes)
        else:
            names = ()
        if self._counters:
            self._state.counters.update(self._counters)
        if self._thread_appends:
            for thread_id, data in self._thread_appends:
                if thread_id:
                    self._state.threads.setdefault(thread_id, []).extend(data)
                else:
                    self.resumed = False
        self.sent = (
            [
                self._inbox.enqueue(self.step_id, target, topic, payload, attempt)
                for target, topic, payload, attempt in self._sends
            ]
            if self._sends
            else ()
        )
        return names
