"""The interpreter: consume the inbox, run the action, trace, checkpoint, choose the next step.

Transition precedence: `end: true`, then the action's outcome (stop, an explicit
target, or the `on_<branch>` field), then `next`. Per-step `retry` and `catch`
follow Amazon States Language. Every failure is a coded `RunError` naming the step.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from runtime.contract.action import Action, Outcome
from runtime.contract.message import Message
from runtime.contract.registry import Registry, default_registry
from runtime.engine import choices as run_choices
from runtime.engine import faults
from runtime.engine import telemetry as otel
from runtime.engine.inbox import Inbox
from runtime.engine.services import Services
from runtime.engine.state import RunState, action_defaults, apply_inputs, initial_variables
from runtime.engine.step_budget import StepBudget
from runtime.engine.step_context import NO_ARRIVAL, Context
from runtime.engine.trace import AS_VALUE, Tracer, summarize
from runtime.errors import (
    InputError,
    MaxStepsExceededError,
    ModelError,
    RunCancelledError,
    RunError,
    StepRuntimeError,
    UsageError,
)
from runtime.format import changes
from runtime.format.access import mapping
from runtime.format.pipeline import Pipeline, Step
from runtime.format.transitions import arrivals, short_config
from runtime.governance.subject import parse_subject, subject_of

_MODEL_CODES = frozenset(
    {"MODEL_RATE_LIMITED", "MODEL_TIMEOUT", "MODEL_PROVIDER_ERROR", "INVALID_STRUCTURED_OUTPUT"}
)


@dataclass
class RunResult:
    """The outcome of a run, in the shape of `runtime exec --json`."""

    run_id: str
    status: str
    steps: list[str]
    state: dict[str, Any]
    output: dict[str, Any]  # see output_of: always a mapping
    error: RunError | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    # One context pack per model call, in call order (runtime/context/packs.py, docs/packs.md).
    packs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the CLI contract."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "steps": self.steps,
            "state": self.state,
            "output": self.output,
            "error": self.error.to_dict() if self.error else None,
        }


def output_of(pipeline: Pipeline, variables: Mapping[str, Any]) -> dict[str, Any]:
    """The run's output, always a mapping of variable names to values.

    With `outputs:` declared, each declared name (None when unset). Without, the answer
    under its own name: `{"final_answer": ...}`, else `{"answer": ...}`, else `{}`. One
    shape for every pipeline, so `result.output["final_answer"]` never depends on
    whether the pipeline happens to declare its outputs.
    """
    if pipeline.outputs:
        return {name: variables.get(name) for name in pipeline.outputs}
    for name in ("final_answer", "answer"):
        if name in variables:
            return {name: variables[name]}
    return {}


@dataclass
class _Position:
    step_id: str | None
    state: RunState
    inbox: Inbox
    store_kw: dict[str, Any] = field(default_factory=dict)  # the run's durability, if chosen
    # The transition taken into step_id (ctx.arrival / ctx.arrival_from); checkpointed.
    arrival: Mapping[str, str] = field(default_factory=lambda: NO_ARRIVAL)
    arrival_from: str | None = None
    resumed: bool = False  # this process resumed the run (a `full` step may degrade once)
    services: Services | None = None  # a resumed run's own (its recorded model, index...)


_clock = time.perf_counter
DURABILITY = ("normal", "full")


def with_subject(
    inputs: Mapping[str, Any] | None, subject: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The inputs with the subject given apart (the embedding API's `subject=`, `--subject`)."""
    if subject is None:
        return inputs
    given = (inputs or {}).get("subject")
    if given is not None and parse_subject(given) != parse_subject(subject):
        raise InputError(
            "the subject is given twice, differently (an input and subject=)",
            code="SUBJECT_INVALID",
        )
    return {**(inputs or {}), "subject": dict(subject)}


class _Plan:
    """What the loop needs of one step, worked out once per engine instead of per visit."""

    __slots__ = (
        "action",
        "action_name",
        "arrivals",
        "attempts",
        "branches",
        "config",
        "end",
        "last_read",
        "next",
        "retry",
        "run",
        "step",
        "step_id",
    )

    def __init__(self, step: Step, action: Action) -> None:
        self.step = step
        self.step_id = step.id
        self.action = action
        self.run = action.run
        # Actions see short-form targets only (routers return step ids); the long forms'
        # attributes are kept per (label, target) for the step arrived at.
        self.action_name = step.action
        # (names, sorted list) the last visit read: a step reads the same names visit after
        # visit, so its STEP events share one list (events are read-only records). One
        # attribute holds both, so concurrent runs of the engine always read a matching pair.
        self.last_read: tuple[list[str] | None, list[str]] = ([], [])
        self.config = short_config(step.config, type(action))
        self.arrivals: dict[tuple[str, str], Mapping[str, str]] = {
            key: MappingProxyType(attrs)
            for key, attrs in arrivals(step.config, type(action)).items()
        }
        self.retry = mapping(step.config.get("retry"))
        self.attempts = int(self.retry.get("max_attempts", 1))
        self.end = step.end
        self.next = step.next
        self.branches = {
            key[3:]: value
            for key, value in self.config.items()
            if key.startswith("on_") and isinstance(value, str)
        }

    def reads(self, read: list[str]) -> list[str]:
        """The sorted names read, once each (a new list when the reads differ from the last visit's)."""
        names = sorted(set(read))
        # A long record of reads (an action reading in a loop) is not kept: such a visit
        # compares unequal (None) and sorts its own.
        self.last_read = (read.copy() if len(read) <= 64 else None, names)
        return names


class Engine:
    """Runs one pipeline; thread-safe for many concurrent runs."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        registry: Registry | None = None,
        services: Services | None = None,
        store: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        durability: str | None = None,
        tracer_provider: Any = None,
    ) -> None:
        self.pipeline = pipeline
        self.registry = registry or default_registry()
        self.services = services or Services(
            settings=pipeline.settings, base_dir=str(pipeline.base_dir)
        )
        self.store = store
        self._wire(self.services)
        if store is not None and self.services.pointer_store is None:
            # Originals behind context pointers live with the run, so they survive resume.
            self.services.pointer_store = store if hasattr(store, "put_original") else None
        self.sleep = sleep
        self._actions: dict[str, Action] = {}
        for step in pipeline.steps:
            cls = self.registry.get(step.action)
            if cls is None:
                raise RunError(
                    f"action {step.action!r} is not registered",
                    code="UNKNOWN_ACTION",
                    step_id=step.id,
                )
            self._actions[step.id] = cls()
        self._plans = {step.id: _Plan(step, self._actions[step.id]) for step in pipeline.steps}
        # An explicit argument (CLI flag, embedding API) wins over settings.durability; with
        # neither, the store's own default applies (normal).
        chosen = durability or pipeline.settings.get("durability")
        if chosen is not None and chosen not in DURABILITY:
            raise RunError(
                f"durability must be one of {', '.join(DURABILITY)}, got {chosen!r}",
                code="DURABILITY_UNKNOWN",
            )
        self.durability: str | None = chosen
        # Spans per run and step (the `otel` extra): a provider given, or the environment's.
        self.telemetry = otel.configure(tracer_provider)
        self._durability_kw: dict[str, Any] = {"durability": chosen} if chosen else {}
        # The variables the pipeline's actions document as defaults; every new run starts with them.
        self.defaults = action_defaults(type(a) for a in self._actions.values())
        # Completed-step history (ctx.history) is kept only when an action reads it.
        self._keeps_history = any(type(a).reads_history for a in self._actions.values())
        # The model names the steps can ask for: a run records what each resolves to.
        self._model_names = run_choices.model_names(pipeline)

    def _wire(self, services: Any) -> None:
        """What branch steps (map, parallel) run their branches with: this engine's store
        and registry (actions/branches.py); branch engines share the services."""
        if getattr(services, "run_store", None) is None:
            services.run_store = self.store
        if getattr(services, "registry", None) is None:
            services.registry = self.registry

    # --- public --------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        max_steps: int | None = None,
        cancel: threading.Event | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        subject: Mapping[str, Any] | None = None,
        step_budget: StepBudget | None = None,
    ) -> RunResult:
        """Start a run and drive it to completion or failure (subject: who it answers,
        the same as a `subject` input; docs/access.md)."""
        run_id = run_id or uuid.uuid4().hex[:12]
        inputs = with_subject(inputs, subject)
        variables = apply_inputs(self.pipeline, inputs or {})
        state = RunState(variables=initial_variables(self.defaults, variables))
        tracer = Tracer(run_id)
        # Model, index, tokenizer: recorded with the run, so a resume holds to them.
        choices = run_choices.record(self.services, self._model_names)
        started = tracer.emit(
            "RUN_STARTED",
            None,
            pipeline=self.pipeline.name,
            inputs=sorted(variables),
            defaults=sorted(set(self.defaults) - set(variables)),
            choices=choices,
            subject=subject_of(inputs or {}).to_dict(),
        )
        if self.store is not None:
            # RUN_STARTED is stored with the run: a kill before the first checkpoint keeps it.
            self.store.create_run(
                run_id,
                self.pipeline,
                dict(inputs or {}),
                events=tracer.drain(),
                choices=choices,
                **self._durability_kw,
            )
        if on_event:  # only once the run exists (a duplicate run id is refused above)
            tracer.listeners.append(on_event)
            on_event(started)
        if self.telemetry is not None:
            spans = self.telemetry.writer(self.pipeline, self.services)
            tracer.listeners.append(spans)
            spans(started)
        pos = _Position(self.pipeline.entry_step_id, state, Inbox(), self._durability_kw)
        # ctx.inputs: the variables the inputs gave, and the subject (never a variable).
        given = (
            {**variables, "subject": inputs["subject"]}
            if inputs and "subject" in inputs
            else variables
        )
        return self._drive(run_id, pos, tracer, given, max_steps, cancel, step_budget)

    def resume(
        self,
        run_id: str,
        *,
        force: bool = False,
        max_steps: int | None = None,
        cancel: threading.Event | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        subject: Mapping[str, Any] | None = None,
        step_budget: StepBudget | None = None,
    ) -> RunResult:
        """Continue a run from its last checkpoint in the store (with the subject it was
        started with; a different `subject` is SUBJECT_CHANGED)."""
        if self.store is None:
            raise RunError("resume needs a run store", code="STORE_ERROR")
        saved = self.store.load(run_id)
        recorded = subject_of(saved["inputs"])
        if subject is not None and parse_subject(subject, "--subject") != recorded:
            raise UsageError(
                f"run {run_id} was started by another subject (tenant {recorded.tenant!r}, "
                f"clearance {list(recorded.clearance)}); a run answers one subject: resume it "
                "without --subject, or start a new run",
                code="SUBJECT_CHANGED",
            )
        if saved["status"] == "completed":
            raise RunError(f"run {run_id} has completed", code="RUN_NOT_RESUMABLE")
        if saved["content_hash"] != self.pipeline.content_hash and not force:
            what = changes.since(self.store.pipeline_parts(run_id), self.pipeline)
            raise RunError(
                f"pipeline changed since run {run_id} started: {what}", code="PIPELINE_CHANGED"
            )
        # The recorded model, index and tokenizer; one given differently is refused unless forced.
        resumed = run_choices.reconcile(
            run_id, self.store.choices(run_id), self.services, self._model_names, force=force
        )
        self._wire(resumed.services)
        # The step killed before its checkpoint runs again: it must find the pointers the
        # checkpoint knew, not those it stored itself (a compaction would not be counted).
        self.store.rewind(run_id)
        engine = saved["engine"]
        state = RunState(
            variables=saved["variables"],
            counters=engine.get("counters", {}),
            step_trace=engine.get("step_trace", []),
            step_count=engine.get("step_count", 0),
            threads=engine.get("threads") or {},
        )
        inbox = Inbox.from_dict(engine.get("inbox", {}))
        tracer = Tracer(run_id, seq=saved["event_seq"], listeners=[on_event] if on_event else [])
        position = saved["position"]
        arrived = mapping(engine.get("arrival"))
        arrival: Mapping[str, str] = MappingProxyType(dict(mapping(arrived.get("attrs"))))
        arrival_from = arrived.get("from")
        if saved.get("fresh"):  # killed before its first checkpoint: start from the entry
            state.variables = initial_variables(
                self.defaults, apply_inputs(self.pipeline, saved["inputs"])
            )
            position = self.pipeline.entry_step_id
            arrival, arrival_from = NO_ARRIVAL, None
            state.threads = {}
        # A resumed run keeps the durability it was started with, unless told otherwise.
        chosen = self.durability or saved.get("durability")
        store_kw = {"durability": chosen} if chosen else {}
        self.store.set_status(run_id, "running", **store_kw)
        extra: dict[str, Any] = {"choices": resumed.choices}
        if not resumed.recorded or resumed.changed:  # a later resume holds to these
            self.store.set_choices(run_id, resumed.choices)
        if not resumed.recorded:
            extra["choices_recorded"] = False
        if resumed.changed:
            extra["changed"] = resumed.changed
        warning = run_choices.warning(run_id, resumed)
        if warning:
            extra["warning"] = warning
        if self.telemetry is not None:
            tracer.listeners.append(self.telemetry.writer(self.pipeline, resumed.services))
        tracer.emit("RUN_RESUMED", None, position=position, forced=force, **extra)
        pos = _Position(
            position, state, inbox, store_kw, arrival, arrival_from, True, resumed.services
        )
        return self._drive(run_id, pos, tracer, saved["inputs"], max_steps, cancel, step_budget)

    # --- loop ----------------------------------------------------------------
    def _drive(
        self,
        run_id: str,
        pos: _Position,
        tracer: Tracer,
        inputs: Mapping[str, Any],
        max_steps: int | None,
        cancel: threading.Event | None,
        step_budget: StepBudget | None = None,
    ) -> RunResult:
        """Drive a run (step_budget: the max_steps a branch run shares with its parent)."""
        limit = max_steps or self.pipeline.max_steps
        rng = random.Random(int(hashlib.sha256(run_id.encode()).hexdigest()[:16], 16))
        error: RunError | None = None
        state = pos.state
        # One context for the whole run, reset per attempt (see Context.begin).
        ctx = Context(
            run_id=run_id,
            pipeline=self.pipeline,
            state=state,
            inbox=pos.inbox,
            services=pos.services or self.services,
            tracer=tracer,
            inputs=inputs,
        )
        if self._keeps_history:  # ctx.history(): completed steps, from the trace (fidelity)
            from runtime.context.fidelity import HistoryLog

            log = HistoryLog({s.id: s.action for s in self.pipeline.steps})
            if pos.resumed and self.store is not None:  # the steps completed before the resume
                log.extend(self.store.events(run_id))
            tracer.listeners.append(log.feed)
            ctx.history_log = log
        ctx.resumed = pos.resumed
        ctx.step_limit = limit
        ctx.step_budget = step_budget
        ctx.cancel = cancel
        try:
            self._loop(run_id, pos, ctx, tracer, limit, cancel, rng)
            self._leftovers(pos, tracer)
        except RunError as exc:
            error = exc
            # Counters (loop guards', context_budget_violations, compactions...) end the trace.
            extra = {"counters": dict(state.counters)} if state.counters else {}
            tracer.emit("RUN_FAILED", exc.step_id, code=exc.code, message=exc.message, **extra)
        status = "failed" if error else "completed"
        if not error:
            extra = {"counters": dict(state.counters)} if state.counters else {}
            tracer.emit("RUN_COMPLETED", None, steps=state.step_count, **extra)
        result = RunResult(
            run_id,
            status,
            list(state.step_trace),
            dict(state.variables),
            output_of(self.pipeline, state.variables),
            error,
        )
        result.packs = (pos.services or self.services).packs.packs(run_id)
        if self.store is not None:
            self._checkpoint(run_id, pos, tracer, status)
            self.store.finish(
                run_id,
                status,
                result.output,
                error.to_dict() if error else None,
                **pos.store_kw,
            )
        else:
            result.events = tracer.drain()
        return result

    def _loop(
        self,
        run_id: str,
        pos: _Position,
        ctx: Context,
        tracer: Tracer,
        limit: int,
        cancel: threading.Event | None,
        rng: random.Random,
    ) -> None:
        """Visit steps from pos.step_id until a transition ends the run (RunError: it failed).

        This is the engine's hot path, written out inline: per step one attempt of the
        action, its staged changes applied, the step recorded, the next step chosen and
        a STEP event appended. What is rare (inbox messages, a failed attempt and its
        retries or catch, an unusual outcome) is in helpers.
        """
        plans = self._plans
        state = pos.state
        inbox = pos.inbox
        step_trace = state.step_trace
        variables = state.variables
        checkpoint = self.store is not None
        clock = _clock
        listeners = tracer.listeners
        pending = tracer.pending  # (a checkpoint drains it into a new list)
        offset = tracer.offset
        tracer_run_id = tracer.run_id
        no_messages: list[Message] = []  # the messages of every step that has none
        messages: list[Message] = no_messages
        step_id = pos.step_id
        count = state.step_count  # kept in step with state.step_count (a catch counts too)
        shared = ctx.step_budget  # a branch run's share of its parent's max_steps
        # What the first step is told it arrived by; later steps' is set as the step before
        # chooses them (and by a catch).
        ctx.arrival = pos.arrival
        ctx.arrival_from = pos.arrival_from
        # `while True` rather than `while step_id is not None`: CPython 3.11 warms a code
        # object up (and specialises its instructions) on JUMP_BACKWARD, which a `while
        # <test>` loop's back edge is not; without it this loop, run once per run, would
        # never be specialised (measured: +5,000 instructions a step).
        while True:
            if step_id is None:
                pos.step_id, pos.arrival, pos.arrival_from = None, ctx.arrival, ctx.arrival_from
                return
            if cancel is not None and cancel.is_set():
                why = getattr(cancel, "reason", None)
                raise RunCancelledError(
                    "the run was cancelled" + (f": {why}" if why else ""), step_id=step_id
                )
            if count >= limit:
                raise MaxStepsExceededError(f"run took more than {limit} steps", step_id=step_id)
            if shared is not None and not shared.take():
                raise MaxStepsExceededError(
                    f"the run's max_steps ({shared.total} left when its branches started, "
                    "shared by every branch) is used up",
                    step_id=step_id,
                )
            plan = plans[step_id]
            # The attempt starts here, without a call: after a commit or a discard nothing
            # is staged or read (see Context.discard), so what is set here is all it needs.
            if inbox.messages:
                messages = inbox.consume(step_id)
                for m in messages:
                    tracer.emit("INBOX_CONSUME", step_id, message=m.to_dict())
                ctx.messages = list(messages)  # the action's copy; `messages` serves retries
            else:
                if no_messages:  # an action appended to the shared empty list
                    no_messages = []
                messages = ctx.messages = no_messages
            ctx.step_id = step_id
            ctx.step = plan.config
            ctx.attempt = attempt = 1
            started = clock()
            try:
                outcome = plan.run(ctx)
                if outcome is not None and type(outcome) is not Outcome:
                    outcome = self._checked(plan, outcome)
            except Exception as exc:  # coded by _failed: retried, caught or raised as a RunError
                retried = self._failed(plan, ctx, pos, tracer, rng, messages, exc)
                if retried is None:  # caught: the catch target is next, pos is updated
                    step_id = pos.step_id
                    count = state.step_count
                    ctx.arrival = pos.arrival
                    ctx.arrival_from = pos.arrival_from
                    if checkpoint:
                        self._checkpoint(run_id, pos, tracer, "running")
                        pending = tracer.pending
                    continue
                outcome, attempt, started = retried
            # The attempt succeeded: apply what it staged, record the step, choose the next.
            if ctx._more:  # a delete, a send, a counter or a thread change: the general path
                wrote = ctx.commit()
                count = state.step_count  # (the steps a branch step's branches took)
            else:
                # Only plain writes (or nothing) staged: applied here, without a call (it
                # saves a fifth of the loop's cost), in Context.commit's steps. The staged
                # dict becomes the STEP event's `wrote`; the next attempt stages into a new one.
                wrote = ctx._writes
                ctx._writes = {}
                if wrote:
                    variables.update(wrote)
                    if state.dirty is not None:
                        state.dirty.update(wrote)
                    if len(wrote) > 1:
                        wrote = {name: wrote[name] for name in sorted(wrote)}
                    if ctx._summarize:  # a value other than an int, bool or null was written
                        ctx._summarize = False
                        for name, value in wrote.items():
                            if type(value) not in AS_VALUE:  # (replacing values while iterating)
                                wrote[name] = summarize(value)
            step_trace.append(step_id)
            count += 1
            state.step_count = count
            if plan.end:
                nxt, label = None, "end"
            elif (  # the common choice, a branch, without building a tuple
                outcome is not None
                and outcome.branch in plan.branches  # (never None: the keys are strings)
                and outcome.target is None
                and not outcome.stop
            ):
                label = outcome.branch
                nxt = plan.branches[label]
            else:
                nxt, label = self._choose(plan, outcome)
            # What the next step is told it arrived by (pos gets it with the next step's id
            # when a checkpoint records them).
            if plan.arrivals:
                ctx.arrival = plan.arrivals.get((label, nxt), NO_ARRIVAL)  # type: ignore[arg-type]
            elif ctx.arrival:
                ctx.arrival = NO_ARRIVAL
            ctx.arrival_from = step_id
            read = ctx.read
            last_read = plan.last_read
            names = last_read[1] if read == last_read[0] else plan.reads(read)
            if read:
                read.clear()  # the next attempt starts with nothing read
            # The STEP event, built here rather than by a Tracer method (a call per step):
            # one clock read gives both the timestamp and the duration.
            now = clock()
            tracer.seq = seq = tracer.seq + 1
            event = {
                "run_id": tracer_run_id,
                "seq": seq,
                "type": "STEP",
                "step_id": step_id,
                "ts": offset + now,
                "action": plan.action_name,
                "outcome": label,
                "next": nxt,
                "attempt": attempt,
                # microsecond resolution: whole microseconds (// 1 floors, as int() did for a
                # duration, without a call), in milliseconds
                "duration_ms": (now - started) * 1e6 // 1 / 1000,
                "read": names,
                "wrote": wrote,
            }
            pending.append(event)
            if listeners:
                for listener in listeners:
                    listener(event)
            step_id = nxt
            if checkpoint:
                pos.step_id, pos.arrival, pos.arrival_from = nxt, ctx.arrival, ctx.arrival_from
                self._checkpoint(run_id, pos, tracer, "running")
                pending = tracer.pending  # the checkpoint drained the events into a new list

    @staticmethod
    def _checked(plan: _Plan, outcome: Any) -> Outcome:
        """The outcome when it is an Outcome (a subclass), else ACTION_FAILED."""
        if not isinstance(outcome, Outcome):
            raise RunError(
                f"action {plan.step.action!r} returned {type(outcome).__name__}, not an Outcome",
                code="ACTION_FAILED",
            )
        return outcome

    def _failed(
        self,
        plan: _Plan,
        ctx: Context,
        pos: _Position,
        tracer: Tracer,
        rng: random.Random,
        messages: list[Message],
        failure: Exception,
    ) -> tuple[Outcome | None, int, float] | None:
        """After a failed first attempt: retry per the step's policy, then catch or raise.

        Returns (outcome, attempt, started) of the attempt that succeeded, or None when the
        error was caught (pos.step_id is then the catch target).
        """
        step = plan.step
        step_id = plan.step_id
        attempt = 1
        while True:
            ctx.discard()  # nothing of the failed attempt reaches the run
            if isinstance(failure, StepRuntimeError):
                err = self._as_run_error(failure, step, attempt)
            else:  # a bug in the action: coded, its traceback kept in the trace
                err = RunError(
                    f"action {step.action!r} raised {type(failure).__name__}: {failure}",
                    code="ACTION_FAILED",
                    step_id=step_id,
                    attempt=attempt,
                )
                tracer.emit(
                    "ACTION_EXCEPTION",
                    step_id,
                    traceback="".join(traceback.format_exception(failure)),
                )
            if not (attempt < plan.attempts and self._retryable(err, plan.retry)):
                pos.step_id = self._catch(plan, err, pos, tracer)
                return None
            delay = self._backoff(plan.retry, attempt, rng)
            tracer.emit("RETRY", step_id, code=err.code, attempt=attempt, delay_s=delay)
            self.sleep(delay)
            attempt += 1
            ctx.begin(step_id, plan.config, list(messages) if messages else [], attempt)
            started = _clock()
            try:
                outcome = plan.action.run(ctx)
                if outcome is not None and type(outcome) is not Outcome:
                    outcome = self._checked(plan, outcome)
            except Exception as exc:  # coded at the top of this loop
                failure = exc
                continue
            return outcome, attempt, started

    @staticmethod
    def _choose(plan: _Plan, outcome: Outcome | None) -> tuple[str | None, str]:
        if plan.end:
            return None, "end"
        if outcome is not None:
            if outcome.stop:
                return None, "end"
            if outcome.target is not None:
                return outcome.target, outcome.label or "route"
            if outcome.branch is not None:
                target = plan.branches.get(outcome.branch)
                if target is not None:
                    return target, outcome.branch
        if plan.next is not None:
            return plan.next, "next"
        raise RunError(
            f"step {plan.step.id!r} chose {outcome.label if outcome else 'no branch'} "
            "but has no transition for it",
            code="NO_TRANSITION",
            step_id=plan.step.id,
        )

    def _catch(self, plan: _Plan, err: RunError, pos: _Position, tracer: Tracer) -> str | None:
        step = plan.step
        catch = mapping(plan.config.get("catch"))
        code = err.code if catch.get(err.code) else "ALL"
        target = catch.get(code)
        if not isinstance(target, str):
            raise err
        pos.arrival = plan.arrivals.get((f"catch {code}", target), NO_ARRIVAL)
        pos.arrival_from = step.id
        pos.state.variables["last_error"] = {
            "code": err.code,
            "message": err.message,
            "step_id": step.id,
        }
        if pos.state.dirty is not None:
            pos.state.dirty.add("last_error")
        pos.state.step_trace.append(step.id)
        pos.state.step_count += 1
        tracer.emit("CATCH", step.id, code=err.code, message=err.message, next=target)
        return target

    @staticmethod
    def _as_run_error(exc: StepRuntimeError, step: Step, attempt: int) -> RunError:
        if isinstance(exc, RunError):
            exc.step_id = exc.step_id or step.id
            exc.attempt = attempt
            return exc
        err = RunError(exc.message, code=exc.code, step_id=step.id, attempt=attempt)
        err.__cause__ = exc
        return err

    @staticmethod
    def _retryable(err: RunError, retry: Mapping[str, Any]) -> bool:
        codes = retry.get("on")
        if isinstance(codes, list):
            return err.code in codes or "ALL" in codes
        return isinstance(err, ModelError) and err.code in _MODEL_CODES

    @staticmethod
    def _backoff(retry: Mapping[str, Any], attempt: int, rng: random.Random) -> float:
        cfg = mapping(retry.get("backoff"))
        initial = float(cfg.get("initial_seconds", 0.5))
        delay = min(
            initial * float(cfg.get("multiplier", 2.0)) ** (attempt - 1),
            float(cfg.get("max_seconds", 30.0)),
        )
        if cfg.get("jitter", True):
            delay = rng.uniform(0, delay)  # "full jitter", seeded per run for determinism
        return round(delay, 6)

    def _leftovers(self, pos: _Position, tracer: Tracer) -> None:
        left = pos.inbox.messages
        if not left:
            return
        policy = self.pipeline.inbox_on_leftover
        described = [m.to_dict() for m in left]
        if policy == "error":
            ids = ", ".join(f"{m.id}->{m.target_step_id}:{m.topic}" for m in left)
            raise RunError(
                f"{len(left)} inbox message(s) never consumed: {ids}",
                code="INBOX_LEFTOVER",
                messages=described,
            )
        if policy == "warn":
            tracer.emit("INBOX_LEFTOVER", None, messages=described)

    def _checkpoint(self, run_id: str, pos: _Position, tracer: Tracer, status: str) -> None:
        if self.store is None:
            return
        if faults.ARMED:  # a test kills the process here (STEP_RUNTIME_KILL_AT=checkpoint:N)
            faults.reached("checkpoint")
        engine = {**pos.state.engine_dict(), "inbox": pos.inbox.to_dict()}
        if pos.arrival_from is not None:  # what the next step is told it arrived by
            engine["arrival"] = {"from": pos.arrival_from, "attrs": dict(pos.arrival)}
        self.store.checkpoint(
            run_id,
            position=pos.step_id,
            variables=pos.state.variables,
            engine=engine,
            events=tracer.drain(),
            status=status,
            changed=pos.state.dirty,
            **pos.store_kw,
        )
        pos.state.dirty = set()
