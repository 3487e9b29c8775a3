"""The StepContext the engine hands to an action: reads see the run, writes are staged.

Writes, inbox sends and counter changes are applied only when the action
returns; a failed attempt leaves the run exactly as it was, so a retry or a
catch starts from clean state (Amazon States Language semantics).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from runtime.contract.action import ENGINE_OWNED
from runtime.contract.message import Message
from runtime.engine.inbox import Inbox
from runtime.engine.state import RunState, check_json
from runtime.engine.step_budget import StepBudget
from runtime.engine.trace import AS_VALUE, summarize
from runtime.errors import StateError

if TYPE_CHECKING:
    from runtime.context.fidelity import HistoryLog
    from runtime.engine.services import Services
    from runtime.engine.trace import Tracer
    from runtime.format.pipeline import Pipeline

_MISSING: Any = ...
NO_ARRIVAL: Mapping[str, str] = MappingProxyType({})  # the entry step's, a short form's
_DELETED = object()
# Written values that are JSON as they stand and that a STEP event's `wrote` records as
# themselves; a write of anything else asks for the summaries (`_summarize`).
_AS_ITSELF: frozenset[type] = frozenset({int, bool, type(None)})


_CONTAINERS = (list, dict)


def _own(value: Any) -> Any:
    """A copy of a JSON value's lists and mappings; strings and numbers are shared (immutable).

    Plain lists and dicts come out, also of a pipeline's own literals (set_variables may
    store a step's `value` as it was loaded). Cheaper than copy.deepcopy (no memo, no
    dispatch). State values nest at most 400 levels (state.check_json).
    """
    if isinstance(value, list):
        return [_own(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return {k: _own(v) if isinstance(v, _CONTAINERS) else v for k, v in value.items()}


class _View(Mapping[str, Any]):
    """A read-only mapping over the run's variables whose lists and mappings come out copied."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def __getitem__(self, name: str) -> Any:
        value = self._data[name]
        return _own(value) if isinstance(value, _CONTAINERS) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data


class Context:
    """One attempt of one step visit.

    The engine keeps one Context per run, so a step costs no new object; an action must
    not keep its ctx after `run` returns. After an attempt that succeeded the engine
    applies what was staged (plain writes itself, anything more through `commit`); after
    one that failed it calls `discard`. Either way the next attempt starts with nothing
    staged and nothing read, and the engine only sets its step, messages and attempt.
    """

    __slots__ = (
        "_charged",
        "_counters",
        "_deleted",
        "_inbox",
        "_more",
        "_no_messages",
        "_sends",
        "_state",
        "_summarize",
        "_thread_appends",
        "_tracer",
        "_variables",
        "_writes",
        "arrival",
        "arrival_from",
        "attempt",
        "cancel",
        "history_log",
        "inputs",
        "messages",
        "pipeline",
        "read",
        "resumed",
        "run_id",
        "services",
        "settings",
        "step",
        "step_budget",
        "step_id",
        "step_limit",
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
        self._variables = state.variables  # (the engine never replaces it during a run)
        self._inbox = inbox
        self._tracer = tracer
        self._writes: dict[str, Any] = {}
        self._sends: list[tuple[str, str, dict[str, Any], int]] = []
        self._counters: dict[str, int] = {}
        # Set when anything but plain writes is staged (a delete, a send, a counter or a
        # thread change): only then does the engine call commit; plain writes it applies
        # itself (Engine._loop, the same steps as commit's first part).
        self._more = False
        # Set when a staged write is not an int, bool or null, so `wrote` needs summaries.
        self._summarize = False
        self._no_messages: list[Message] = []
        # The names read, in the order of the reads, repeats kept: an append is the cheapest
        # record (the engine compares it with the step's last visit and sorts it only when
        # it differs, see _Plan.reads).
        self.read: list[str] = []
        # The transition taken into the current step: its long-form attributes (fidelity,
        # thread_id) and the step it came from. The engine sets both as the step before
        # chooses this one (or a catch does), and at the start of a run or a resume.
        self.arrival: Mapping[str, str] = NO_ARRIVAL
        self.arrival_from: str | None = None
        # Completed steps from the trace (set by the engine when an action reads history) and
        # whether this process resumed the run (cleared by mark_resume_handled's commit).
        self.history_log: HistoryLog | None = None
        self.resumed = False
        self._thread_appends: list[tuple[str, list[dict[str, Any]]]] | None = None
        # The run's max_steps and, for a branch run, the budget it shares with its parent
        # and siblings (runtime/engine/step_budget.py); steps its branches took, to charge.
        self.step_limit = pipeline.max_steps
        self.step_budget: StepBudget | None = None
        self._charged = 0
        # The run's cancel event (None: it cannot be cancelled), for branch runs to follow.
        self.cancel: Any = None
        self.begin("", {}, [], 1)

    def begin(
        self, step_id: str, config: Mapping[str, Any], messages: list[Message], attempt: int
    ) -> None:
        """Start an attempt (a retry; the engine's loop starts a visit inline): nothing staged."""
        self.discard()
        self.step_id = step_id
        self.step = config
        if not messages:  # one empty list serves every step without messages...
            messages = self._no_messages
            if messages:  # ...unless an action appended to it
                messages = self._no_messages = []
        self.messages = messages
        self.attempt = attempt

    def discard(self) -> None:
        """Drop everything the attempt staged and read (after a failed attempt).

        After a commit nothing is staged, so the engine's loop starts the next visit by
        setting step_id, step, messages and attempt itself, with no call (see Engine._loop);
        a failed attempt is discarded before anything else happens (retry, catch or raise).
        """
        # The containers are emptied here, never handed on: a failed attempt's staged
        # changes never reach the next attempt or step.
        if self._writes:
            self._writes.clear()
            self._summarize = False
        if self._more:
            self._sends.clear()
            self._counters.clear()
            self._thread_appends = None
            self._charged = 0
            self._more = False
        if self.read:
            self.read.clear()

    # --- variables -----------------------------------------------------------
    def get(self, name: str, default: Any = _MISSING) -> Any:
        """Read a state variable; without a default a missing one raises VARIABLE_MISSING."""
        self.read.append(name)
        writes = self._writes
        if writes and name in writes:
            value = writes[name]
            if value is not _DELETED:
                return value
        else:
            value = self._variables.get(name, _MISSING)  # no JSON value is `...`
            if value is not _MISSING:
                # The run's value is not the action's: a list or mapping is handed out as a
                # copy, so a change in place (then a failure, or no write) leaves no trace.
                return _own(value) if isinstance(value, _CONTAINERS) else value
        if default is _MISSING:
            raise StateError(
                f"step {self.step_id!r} reads variable {name!r}, which is not set",
                code="VARIABLE_MISSING",
                step_id=self.step_id,
            )
        return default

    def variables(self) -> Mapping[str, Any]:
        """A read-only view of the committed variables (for preambles; reads are not tracked).

        A value read through it is a copy, as from `get`: nothing read here changes the run.
        """
        return _View(self._variables)

    def has(self, name: str) -> bool:
        """True when the state variable is set."""
        if name in self._writes:
            return self._writes[name] is not _DELETED
        return name in self._variables

    def set(self, name: str, value: Any) -> None:
        """Stage a write; engine-owned names raise STATE_PROTECTED."""
        if name in ENGINE_OWNED:
            raise StateError(
                f"step {self.step_id!r} may not overwrite engine-owned {name!r}",
                code="STATE_PROTECTED",
                step_id=self.step_id,
            )
        kind = type(value)
        if kind is str:
            if not value.isascii():  # a lone surrogate is no UTF-8 text (--json, the store)
                check_json(value, f"variable {name!r}", self.step_id)
            self._summarize = True
        elif kind not in _AS_ITSELF:  # the trace records a summary (or, a float, walks it)
            check_json(value, f"variable {name!r}", self.step_id)
            self._summarize = True
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
        self._more = True

    # --- inbox ---------------------------------------------------------------
    def enqueue(self, target_step_id: str, topic: str, payload: Mapping[str, Any]) -> Message:
        """Stage a message to a step (payload must be JSON)."""
        data = dict(payload)
        check_json(data, f"inbox payload for {target_step_id!r}", self.step_id)
        self._sends.append((target_step_id, topic, data, 1))
        self._more = True
        return Message("pending", self.step_id, target_step_id, topic, data, 1)

    def requeue(self, message: Message) -> Message:
        """Stage a consumed message's return to its target with attempt + 1."""
        self._sends.append(
            (message.target_step_id, message.topic, dict(message.payload), message.attempt + 1)
        )
        self._more = True
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
        self._more = True
        return value

    # --- the step budget branches share (runtime/engine/step_budget.py) --------
    def branch_budget(self) -> StepBudget:
        """The budget this step's branches count their steps against: the one this run
        shares, else what is left of its max_steps (this step not counted yet)."""
        if self.step_budget is not None:
            return self.step_budget
        return StepBudget(self.step_limit - self._state.step_count - 1)

    def charge_steps(self, n: int) -> None:
        """Stage n more steps on this run's count (the steps its branches took)."""
        if self.step_budget is None and n > 0:  # a shared budget counted them already
            self._charged += n
            self._more = True

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
        self._more = True

    def mark_resume_handled(self) -> None:
        """Stage the end of the after-resume state (the one degraded `full` step has run)."""
        if self._thread_appends is None:
            self._thread_appends = []
        self._thread_appends.append(("", []))  # "" marks the resume handled; no thread is ""
        self._more = True

    # --- engine side ---------------------------------------------------------
    def commit(self) -> dict[str, Any]:
        """Apply the staged changes; return the STEP event's `wrote` (names sorted).

        The general path, for an attempt that staged more than plain writes (`_more`);
        the engine's loop applies plain writes itself, in the same steps. Afterwards
        nothing is staged (the names read stay in `read` for the engine's event, which
        empties it). Messages sent are enqueued and traced (INBOX_ENQUEUE).
        """
        # The staged dict itself becomes the event's `wrote` (its values replaced by
        # summaries where they are not numbers, booleans or null); the next attempt stages
        # into a new one.
        writes = self._writes
        self._writes = {}
        self._more = self._summarize = False
        if writes:
            variables = self._variables
            for name, value in writes.items():
                if value is _DELETED:
                    variables.pop(name, None)
                else:
                    variables[name] = value
            if self._state.dirty is not None:
                self._state.dirty.update(writes)
            if len(writes) > 1:
                writes = {name: writes[name] for name in sorted(writes)}
            for name, value in writes.items():
                if type(value) not in AS_VALUE:  # replacing values while iterating is safe
                    writes[name] = {"deleted": True} if value is _DELETED else summarize(value)
        if self._counters:
            self._state.counters.update(self._counters)
            self._counters.clear()
        if self._charged:
            self._state.step_count += self._charged
            self._charged = 0
        if self._thread_appends:
            for thread_id, data in self._thread_appends:
                if thread_id:
                    self._state.threads.setdefault(thread_id, []).extend(data)
                else:
                    self.resumed = False
        self._thread_appends = None
        if self._sends:
            sends, self._sends = self._sends, []
            for target, topic, payload, attempt in sends:
                message = self._inbox.enqueue(self.step_id, target, topic, payload, attempt)
                self._tracer.emit("INBOX_ENQUEUE", self.step_id, message=message.to_dict())
        return writes
