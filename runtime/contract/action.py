"""The action contract: the source of truth for what an action is and may do.

An action is a class registered under a name (entry-point group
``step_runtime.actions``; built-ins use the same group). A step names it with
``action: <name>``. The class declares, statically:

- ``fields``: the JSON Schema ``properties`` of its step-specific fields, and
  ``required``: which of them must be present. The document schema is generated
  from these (``additionalProperties: false``), so a misspelt field is an error.
- ``outcomes``: the branches it may choose, each read from the step field
  ``on_<outcome>``. Routers override :meth:`targets` to expose every step id
  their configuration can route to, so graph checks see every transition.
- ``check``: cross-field rules a schema cannot express, as a generator of
  :class:`Problem` (a code, a message and a path relative to the step).
- ``bounds_loops``: a cycle through such a step is bounded (``loop_guard``).
- ``output_bounds``: the most tokens each variable it writes can hold, where the
  action enforces a budget (``manage_context_budget``: ``max_context_tokens``);
  ``prompt_envelope``: what a model step sends, as far as it is known before a run.
  Validation's static budget checks (``runtime.format.budget``) read both.
- ``terminal``: the action ends the run (``finalize``).
- ``runnable``: False while only the schema exists; such a step fails validation
  for execution with ``ACTION_NOT_RUNNABLE``.
- ``reads`` / ``writes``: the state variables it reads and writes. Validation's
  dataflow checks (``runtime.format.dataflow``) follow them through the step graph:
  :meth:`step_reads` yields the variables a step needs set (by default each of
  ``reads``) as :class:`VariableRead`, with the field that names it, and
  :meth:`step_writes` the variables it may write (by default ``writes``). An action
  whose fields name variables (``source``, ``user_parts.*.source``, ``rules[].set``)
  overrides them; a variable read with a fallback (``ctx.get(name, default)``) that
  does no harm when unset is no need and is left out of ``step_reads``.
- ``reads_settings``: settings keys it reads directly (beyond the known settings and
  its ``*_from_settings`` fields), so validation does not warn that nothing reads them.
- ``tool``: the action's tool face (:class:`runtime.contract.tool.ToolFace`), or None: a
  `call_model` step may offer an action with one to its model (`tools:`, docs/tools.md).
- ``defaults``: state variables every run of a pipeline using the action starts
  with, and their values (``context_blocks: []``), so a later step can read a
  variable the action may leave unwritten (no evidence found). Inputs win; the
  values must be JSON and no engine-owned name.

At run time the engine creates one instance per step and calls
``run(ctx)`` exactly once per visit, after consuming the step's inbox into
``ctx.messages``. ``run`` returns an :class:`Outcome` (or ``None`` to follow
``next``) and must be thread-safe: many runs may share one pipeline. Failures are
raised as ``runtime.errors.RunError`` (or a subclass) with a code; the engine
fills in the step id and attempt. Any other exception is a bug in the action
and is reported as ``ACTION_FAILED``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from runtime.contract.message import Message
from runtime.contract.tool import ToolFace

# Engine-owned: written only by the engine; no YAML rule, action or model output may set them.
ENGINE_OWNED: frozenset[str] = frozenset(
    # `subject`: who the run answers, from its inputs only (runtime/governance/subject.py).
    {"inbox", "loop_counters", "counters", "step_trace", "run", "run_id", "last_error", "subject"}
)

Path = tuple[str | int, ...]

STEP_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
VARIABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_VARIABLE = re.compile(VARIABLE_PATTERN)


@dataclass(frozen=True)
class Outcome:
    """What a step chose: a named branch (``on_<branch>``), an explicit target, or stop."""

    branch: str | None = None
    target: str | None = None
    label: str | None = None
    stop: bool = False

    # Outcomes are frozen and compare by value, so one shared instance per choice serves every
    # step: a frozen dataclass costs microseconds to build, a dict lookup does not.
    @classmethod
    def to_branch(cls, name: str) -> Outcome:
        """Follow the step field ``on_<name>``."""
        hit = _BRANCHES.get(name) if cls is Outcome else None
        return hit or _share(cls, _BRANCHES, name, branch=name, label=name)

    @classmethod
    def goto(cls, step_id: str, label: str) -> Outcome:
        """Go to a step chosen from the step's configuration (routers)."""
        hit = _GOTOS.get((step_id, label)) if cls is Outcome else None
        return hit or _share(cls, _GOTOS, (step_id, label), target=step_id, label=label)

    @classmethod
    def end(cls) -> Outcome:
        """End the run after this step."""
        hit = _GOTOS.get(None) if cls is Outcome else None
        return hit or _share(cls, _GOTOS, None, stop=True, label="end")


_BRANCHES: dict[Any, Outcome] = {}
_GOTOS: dict[Any, Outcome] = {}


def _share(cls: type[Outcome], shared: dict[Any, Outcome], key: Any, **fields: Any) -> Outcome:
    """A new outcome, kept for reuse when it is a plain Outcome (at most 4,096 per kind)."""
    outcome = cls(**fields)
    if cls is Outcome and len(shared) < 4096:
        shared[key] = outcome
    return outcome


@dataclass(frozen=True)
class Transition:
    """A statically visible edge of the step graph."""

    label: str
    path: Path  # relative to the step, e.g. ("on_ok",) or ("routes", "answer")
    target: str


@dataclass(frozen=True)
class Problem:
    """A problem found by an action's own checks; positioned by the validator."""

    code: str
    message: str
    path: Path = ()
    hint: str = ""
    severity: str = "error"
    key: bool = False  # point at the key rather than the value


@dataclass(frozen=True)
class PromptSlot:
    """A variable part of a model prompt: the state variable rendered, and text added around it."""

    label: str  # where it comes from in the step, e.g. "user_parts.question"
    variable: str
    wrapper: str = ""  # text the action may add around the value (an evidence frame)
    path: Path = ()  # relative to the step
    summarizable: bool = True  # False: a context policy never shortens it (the question)


@dataclass(frozen=True)
class PromptEnvelope:
    """What a model step sends, as far as it is known before a run (static budget checks).

    ``fixed`` is text sent on every call (the system prompt, template text, joiners);
    ``overhead_tokens`` the chat framing on top; ``slots`` the variable parts, whose size
    comes from the bounds the writers of their variables declare (``Action.output_bounds``).
    """

    model: str | None
    fixed: tuple[str, ...]
    overhead_tokens: int
    slots: tuple[PromptSlot, ...]
    output_tokens: int
    unbounded: tuple[str, ...] = ()  # parts with no static bound at all (a thread, history)
    tokenizer: str | None = None  # None: the model's own
    # The call starts with a context-fidelity preamble or joins a `full` thread, by the mode
    # the step resolves (docs/fidelity.md): the budget checks add what that mode can send.
    fidelity: bool = False


@dataclass(frozen=True)
class VariableRead:
    """A state variable a step needs set when it runs: any one of `names` serves.

    `names` holds alternatives tried in order (finalize's default answer sources);
    `path` is the field naming it, relative to the step (``("user_parts", "q", "source")``),
    or ``()`` for a variable the action reads of its own accord; `field` is how a
    message names it (default: the path joined with dots).
    """

    names: tuple[str, ...]
    path: Path = ()
    field: str = ""

    @classmethod
    def named(cls, step: Mapping[str, Any], key: str, default: str) -> VariableRead:
        """The variable the step field `key` names, else the action's default for it."""
        value = step.get(key)
        if isinstance(value, str):
            return cls((value,), (key,))
        return cls((default,), (), f"{default}, as no `{key}` is given")


class PipelineView(Protocol):
    """What an action sees of its pipeline (implemented by the format layer's Pipeline)."""

    @property
    def prompts_dir(self) -> Any:
        """The folder prompt files are looked up in."""

    def prompt_path(self, key: str) -> Any:
        """The file of a prompt key under the pipeline's prompts folder."""


class ServicesView(Protocol):
    """What an action may ask of the run's services (implemented by the engine's Services)."""

    def tokens(self, encoding: str | None = None) -> Any:
        """The token counter for an encoding."""

    def tokens_for(self, config: Any) -> Any:
        """The token counter of a model configuration (its tokenizer, `server` included)."""

    def model(self, name: str | None = None) -> Any:
        """The model provider for a named model."""

    @property
    def node_store(self) -> Any:
        """The node store."""

    @property
    def packs(self) -> Any:
        """Where model calls' context packs are stored (save_pack, packs; docs/packs.md)."""

    @property
    def memory_store(self) -> Any:
        """The memory store to recall from (runtime/retrieval/memory_store.py MemoryStore)."""

    def memory_writer(self) -> Any:
        """The memory store to write to (created when missing)."""


class StepContext(Protocol):
    """What an action sees while it runs (implemented by the engine)."""

    run_id: str
    step_id: str
    step: Mapping[str, Any]
    settings: Mapping[str, Any]
    inputs: Mapping[str, Any]
    messages: list[Message]
    attempt: int
    # The transition taken into this step: `fidelity` / `thread_id` when its long form set
    # them (else `{}`: the entry step, a short form), and the step it came from (None at entry).
    arrival: Mapping[str, str]
    arrival_from: str | None
    # Context fidelity (docs/fidelity.md): the completed-step log the engine keeps when an
    # action declares reads_history (None otherwise), and whether this process resumed the run.
    history_log: Any
    resumed: bool

    @property
    def pipeline(self) -> PipelineView:
        """The pipeline the step belongs to."""

    @property
    def services(self) -> ServicesView:
        """The run's services (tokens, models, node store)."""

    def get(self, name: str, default: Any = ...) -> Any:
        """Read a state variable; without a default a missing one raises VARIABLE_MISSING."""

    def has(self, name: str) -> bool:
        """True when the state variable is set."""

    def set(self, name: str, value: Any) -> None:
        """Write a state variable; engine-owned names raise STATE_PROTECTED."""

    def delete(self, name: str) -> None:
        """Remove a state variable if present."""

    def enqueue(self, target_step_id: str, topic: str, payload: Mapping[str, Any]) -> Message:
        """Send a message to a step's inbox (payload must be JSON)."""

    def requeue(self, message: Message) -> Message:
        """Put a consumed message back for its target with attempt + 1."""

    def trace(self, event: str, **data: Any) -> None:
        """Record a notable decision in the run's trace."""

    def counter(self, name: str) -> int:
        """Read an engine-owned counter (e.g. a loop guard's)."""

    def increment(self, name: str, by: int = 1) -> int:
        """Increment an engine-owned counter (by `by`) and return the new value."""

    def variables(self) -> Mapping[str, Any]:
        """A read-only view of the committed variables (reads are not tracked)."""

    @property
    def cancel(self) -> Any:
        """The run's cancel event (a threading.Event; None when it cannot be cancelled)."""

    def branch_budget(self) -> Any:
        """The max_steps budget this step's branch runs share (runtime/engine/step_budget.py)."""

    def charge_steps(self, n: int) -> None:
        """Count n steps its branches took on this run (a branch step, once they end)."""

    def history(self) -> list[dict[str, Any]]:
        """The run's completed step visits: id, action, outcome, duration, attempts, notes."""

    def thread(self, thread_id: str) -> list[dict[str, Any]]:
        """A copy of a conversation thread's committed messages ([] for a new one)."""

    def append_thread(self, thread_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Stage messages to append to a thread (applied when the attempt succeeds)."""

    def mark_resume_handled(self) -> None:
        """Stage the end of the after-resume state (a degraded `full` step has run)."""


class Action:
    """Base class of every action. See the module docstring for the contract."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    fields: ClassVar[dict[str, dict[str, Any]]] = {}
    required: ClassVar[tuple[str, ...]] = ()
    outcomes: ClassVar[tuple[str, ...]] = ()
    reads: ClassVar[tuple[str, ...]] = ()
    reads_settings: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ()
    defaults: ClassVar[dict[str, Any]] = {}
    runnable: ClassVar[bool] = False
    bounds_loops: ClassVar[bool] = False
    terminal: ClassVar[bool] = False
    # The engine keeps the run's completed-step history (ctx.history) only if an action reads it.
    reads_history: ClassVar[bool] = False
    # Extra JSON Schema keywords for the step object (e.g. dependentSchemas).
    schema_extra: ClassVar[dict[str, Any]] = {}
    # The action's behaviour version, frozen by `runtime lock` (docs/lock.md): bump it when
    # what the action does observably changes, and say so in docs/migrating.md.
    behavior_version: ClassVar[str] = "1"
    # How a model may call it (docs/tools.md); None: it is no tool.
    tool: ClassVar[ToolFace | None] = None

    @classmethod
    def targets(cls, step: Mapping[str, Any]) -> Iterator[Transition]:
        """Every step id this step's configuration can route to."""
        if isinstance(step.get("next"), str):
            yield Transition("next", ("next",), step["next"])
        for outcome in cls.outcomes:
            key = f"on_{outcome}"
            if isinstance(step.get(key), str):
                yield Transition(outcome, (key,), step[key])
        catch = step.get("catch")
        if isinstance(catch, Mapping):
            for code, target in catch.items():
                if isinstance(target, str):
                    yield Transition(f"catch {code}", ("catch", str(code)), target)

    @classmethod
    def inbox_targets(cls, step: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        """Step ids this step may send inbox messages to (validated to exist)."""
        return iter(())

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Cross-field rules beyond the schema."""
        return iter(())

    @classmethod
    def output_bounds(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, int]:
        """The most tokens each variable this step writes can hold (only those it bounds)."""
        return {}

    @classmethod
    def prompt_envelope(
        cls, step: Mapping[str, Any], settings: Mapping[str, Any], pipeline: PipelineView
    ) -> PromptEnvelope | None:
        """The prompt this step sends a model, statically; None when it calls no model."""
        return None

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """The variables this step needs set when it runs (dataflow); default: each of `reads`."""
        for name in cls.reads:
            yield VariableRead((name,))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """The variables this step may write (dataflow); default: `writes` (no placeholders)."""
        return (name for name in cls.writes if _VARIABLE.fullmatch(name))

    def run(self, ctx: StepContext) -> Outcome | None:
        """Execute one visit of the step."""
        raise NotImplementedError(f"action {self.name!r} is not runnable yet")


@dataclass
class ActionInfo:
    """A registered action and where it came from."""

    name: str
    cls: type[Action] | None
    source: str  # "builtin" or the distribution name
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def setting_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """Schema for a ``*_from_settings`` companion field of a field with this schema."""
    return {
        "type": "string",
        "minLength": 1,
        "description": "Name of a settings key holding this value.",
    }
