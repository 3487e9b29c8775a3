"""Static budget checks: the worst-case prompt of every model step, before a run.

For each step whose action declares a prompt envelope (`Action.prompt_envelope`,
`call_model`), the prompt is split into what is known before a run and what is not:

- fixed: the system prompt file, template text and chat framing, counted with the real
  tokenizer of the step's model, plus the reserved output (`max_output_tokens`);
- bounded: variables every source of which has a static bound -- a step that enforces a
  budget on what it writes (`Action.output_bounds`: `manage_context_budget` bounds
  `context_blocks` by `max_context_tokens`, `fetch_node_texts` bounds `node_texts` by its
  evidence budget, `call_model` bounds its reply by `max_output_tokens`), an input with
  `maxLength`, an action default;
- unbounded: everything else, named with the reason.

The envelope is checked against the model's window (`runtime.models.config`): fixed
alone over the window can never run (`BUDGET_IMPOSSIBLE`, an error); a prompt that may
exceed it, with no `context_policy` and no `catch` of `CONTEXT_OVERFLOW`, is a warning
naming the parts to bound (`BUDGET_MAY_OVERFLOW`).

A policy is no excuse for what it may not touch: what a context policy cannot summarise
(the fixed text, the fidelity preamble, parts reading `question` or marked
`summarizable: false`) is checked against the policy's own budget. Over it at their
bounds is `BUDGET_POLICY_CANNOT_FIT` (an error); such a part with no bound still warns
(`BUDGET_MAY_OVERFLOW`); a prompt budget under the emergency floor, where the policy
rejects instead of summarising, is `POLICY_BUDGET_UNDER_FLOOR` (a warning).

Counting is lazy: validation first tries the cheap bound (a token covers at least one
UTF-8 byte) and loads the tokenizer only when that bound cannot decide;
`runtime budget` always counts exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.contract.action import PipelineView, PromptEnvelope
from runtime.contract.registry import Registry
from runtime.format.access import mapping
from runtime.format.checks import Finding

# A token covers at least one UTF-8 byte, and a code point is at most four bytes.
BYTES_PER_CHAR = 4
_OVERFLOW_CODES = ("CONTEXT_OVERFLOW", "ALL")


@dataclass(frozen=True)
class Bound:
    """The most tokens a variable can hold when a step reads it; None when nothing bounds it."""

    tokens: int | None
    why: str


@dataclass(frozen=True)
class Part:
    """One part of a prompt envelope: a slot's bound plus the text around it."""

    label: str
    variable: str
    tokens: int | None  # None: unbounded
    why: str
    # Where what makes it unbounded is written, when elsewhere than the step (a transition
    # into it that sets `fidelity: full`): the warning points there.
    at: tuple[str | int, ...] = ()
    summarisable: bool = True  # False: a context policy may not shorten it


@dataclass
class StepBudget:
    """The worst-case prompt of one model step against its model's window."""

    step_id: str
    index: int
    model: str
    window: int
    tokenizer: str
    fixed_tokens: int
    output_tokens: int
    parts: list[Part] = field(default_factory=list)
    guard: str = ""  # "context_policy", "catch CONTEXT_OVERFLOW", or ""
    exact: bool = True  # False: fixed_tokens is the byte bound (validation's fast path)
    # The step's context policy as the run applies it (budget, reserve, floor), or None.
    policy: dict[str, Any] | None = None

    @property
    def minimum(self) -> int:
        """Tokens every call needs: fixed text, framing and the reserved output."""
        return self.fixed_tokens + self.output_tokens

    @property
    def bounded_maximum(self) -> int:
        """The minimum plus every bounded part at its bound."""
        return self.minimum + sum(p.tokens or 0 for p in self.parts)

    @property
    def unbounded(self) -> list[Part]:
        """Parts with no static bound."""
        return [p for p in self.parts if p.tokens is None]

    @property
    def unsummarisable_maximum(self) -> int:
        """The fixed text plus every part a policy may not summarise, at its bound."""
        return self.fixed_tokens + sum(p.tokens or 0 for p in self.parts if not p.summarisable)

    @property
    def policy_cannot_fit(self) -> bool:
        """A policy is on and what it may not summarise is over its budget at the bounds."""
        return (
            self.policy is not None
            and self.policy["enabled"]
            and self.unsummarisable_maximum > self.policy["budget"]
        )

    @property
    def status(self) -> str:
        """impossible | fits | may_overflow (bounded but over) | unbounded."""
        if self.minimum > self.window:
            return "impossible"
        if self.unbounded:
            return "unbounded"
        return "fits" if self.bounded_maximum <= self.window else "may_overflow"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form `runtime budget --json` prints."""
        return {
            "step": self.step_id,
            "model": self.model,
            "window": self.window,
            "tokenizer": self.tokenizer,
            "fixed_tokens": self.fixed_tokens,
            "output_tokens": self.output_tokens,
            "minimum": self.minimum,
            "bounded_maximum": self.bounded_maximum,
            "parts": [
                {
                    "label": p.label,
                    "variable": p.variable,
                    "tokens": p.tokens,
                    "why": p.why,
                    "summarisable": p.summarisable,
                }
                for p in self.parts
            ],
            "unbounded": [p.label for p in self.unbounded],
            "unsummarisable_maximum": self.unsummarisable_maximum,
            "guard": self.guard or None,
            "policy": self.policy,
            "status": self.status,
        }


def variable_bounds(
    steps: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    registry: Registry,
    inputs: Any,
) -> dict[str, Bound]:
    """Each variable's bound: the largest over all its sources (inputs, defaults, writers).

    Every writer counts, whatever the order of the steps: a variable is bounded only
    when no path through the graph can fill it past the bound.
    """
    from runtime.context.tokens import get_counter

    sources: dict[str, list[Bound]] = {}
    counter: Any = None

    def add(name: str, bound: Bound) -> None:
        sources.setdefault(name, []).append(bound)

    for name, spec in mapping(inputs).items():
        spec = {"type": spec} if isinstance(spec, str) else mapping(spec)
        limit = spec.get("maxLength")
        if spec.get("type") == "string" and isinstance(limit, int):
            add(
                str(name),
                Bound(limit * BYTES_PER_CHAR, f"input {name} has maxLength {limit}"),
            )
        else:
            add(str(name), Bound(None, f"input {name} has no maxLength"))
    seen: set[str] = set()
    for step in steps:
        action = step.get("action")
        cls = registry.get(action) if isinstance(action, str) else None
        if cls is None:
            continue
        sid = step.get("id", "?")
        if cls.name not in seen:
            seen.add(cls.name)
            for name, value in cls.defaults.items():
                if counter is None:
                    counter = get_counter(str(settings.get("tokenizer", "cl100k_base")))
                text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                add(name, Bound(counter.count(text), f"default of {cls.name}"))
        declared = cls.output_bounds(step, settings)
        for name, tokens in declared.items():
            add(name, Bound(tokens, f"step {sid} ({cls.name}) keeps it within {tokens}"))
        for name in cls.writes:
            if name not in declared:
                add(name, Bound(None, f"step {sid} ({cls.name}) writes it unbounded"))
    out: dict[str, Bound] = {}
    for name, found in sources.items():
        loose = [b for b in found if b.tokens is None]
        if loose:
            out[name] = loose[0]
        else:
            out[name] = max(found, key=lambda b: b.tokens or 0)
    return out


def envelopes(
    steps: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    registry: Registry,
    pipeline: PipelineView,
    inputs: Any = None,
    *,
    exact: bool = True,
    base_dir: str | None = None,
) -> list[StepBudget]:
    """The envelope of every model step; exact=False counts only when bytes cannot decide."""
    from runtime.errors import ModelError
    from runtime.models import config_from_spec

    bounds: dict[str, Bound] | None = None
    into: dict[str, list[Arrival]] | None = None
    out: list[StepBudget] = []
    for i, step in enumerate(steps):
        name = step.get("action")
        cls = registry.get(name) if isinstance(name, str) else None
        if cls is None:
            continue
        envelope = cls.prompt_envelope(step, settings, pipeline)
        if envelope is None:
            continue
        spec = envelope.model or settings.get("default_model") or "extractive"
        try:
            config = config_from_spec(spec, settings, base_dir=base_dir, spec_dir=base_dir)
        except ModelError:
            continue  # reported by the model checks
        if bounds is None:
            bounds = variable_bounds(steps, settings, registry, inputs)
        added: list[Part] = []
        if envelope.fidelity:
            if into is None:
                into = arrivals_into(steps, registry)
            entry = settings.get("entry_step_id") or steps[0].get("id")
            arrived = into.get(str(step.get("id")), [])
            added = fidelity_parts(step, settings, arrived, entry == step.get("id"))
        out.append(
            _measure(
                step,
                i,
                envelope,
                config,
                bounds,
                settings,
                exact=exact,
                model=str(spec),
                fidelity=added,
            )
        )
    return out


@dataclass(frozen=True)
class Arrival:
    """A transition into a step: the step it leaves, its label, attributes and where."""

    source: str
    label: str
    attrs: Mapping[str, str]
    path: tuple[str | int, ...]  # from the pipeline root to the long form itself


def arrivals_into(
    steps: Sequence[Mapping[str, Any]], registry: Registry
) -> dict[str, list[Arrival]]:
    """Every step's incoming transitions (short and long form), by target step id."""
    from runtime.format.transitions import outgoing

    into: dict[str, list[Arrival]] = {}
    for i, step in enumerate(steps):
        name = step.get("action")
        cls = registry.get(name) if isinstance(name, str) else None
        for edge in outgoing(step, cls):
            where = ("steps", i, *(edge.path[:-1] if edge.long else edge.path))
            into.setdefault(edge.target, []).append(
                Arrival(str(step.get("id", "?")), edge.label, edge.attrs, where)
            )
    return into


def fidelity_parts(
    step: Mapping[str, Any],
    settings: Mapping[str, Any],
    arrived: Sequence[Arrival],
    entry: bool,
) -> list[Part]:
    """What the step's fidelity adds to its prompt, over every way of arriving at it.

    A fresh mode adds its preamble, at most the mode's budget (docs/fidelity.md) and the
    blank line joining it to the system prompt; `full` adds a thread, which no static
    bound limits. A transition that sets `fidelity` decides for arrivals by it; the step's
    own mode (its `fidelity`, settings.default_fidelity, compact) for the entry, for
    transitions that set none and for a step nothing names.
    """
    from runtime.context import fidelity as fid

    own, source = fid.resolve_mode({}, step, settings)
    ways: list[tuple[str, Arrival | None]] = [
        (a.attrs["fidelity"], a) for a in arrived if "fidelity" in a.attrs
    ]
    if entry or not arrived or any("fidelity" not in a.attrs for a in arrived):
        ways.append((own, None))
    parts: list[Part] = []
    fresh = [(m, a) for m, a in ways if m in fid.BUDGETS]
    if fresh:
        mode, by = max(fresh, key=lambda w: fid.BUDGETS[w[0]])
        how = f"from step {by.source!r} by {by.label}" if by else f"the {_FROM[source]}"
        parts.append(
            Part(
                f"fidelity preamble ({mode})",
                "",
                fid.BUDGETS[mode] + PREAMBLE_JOINT,
                f"the {mode} preamble's budget ({how})",
                summarisable=False,
            )
        )
    for mode, by in ways:
        if mode != "full":
            continue
        if by is None:
            why = f"the {_FROM[source]} is full: the step sends its thread's whole history"
            parts.append(Part("thread (fidelity full)", "", None, why))
        else:
            why = (
                f"arrived at from step {by.source!r} by {by.label} with fidelity full, the step "
                "sends its thread's whole history"
            )
            parts.append(Part("thread (fidelity full)", "", None, why, (*by.path, "fidelity")))
    return parts


# Tokens the blank line between a preamble and the system prompt (fid.with_preamble) adds to
# the two counted apart: "\n\n" is one token in cl100k_base and o200k_base, and the
# pre-tokeniser may regroup the characters either side (o200k_base joins "```\n\n/" into one
# piece) for one more; a seeded search of random joins finds no more than 2
# (tests/runtime/test_budget_fidelity.py).
PREAMBLE_JOINT = 2
_FROM = {
    "step": "step's fidelity",
    "settings.default_fidelity": "pipeline's default_fidelity",
    "default": "default fidelity",
    "transition": "transition's fidelity",
}


def _measure(
    step: Mapping[str, Any],
    index: int,
    envelope: PromptEnvelope,
    config: Any,
    bounds: Mapping[str, Bound],
    settings: Mapping[str, Any],
    *,
    exact: bool,
    model: str,
    fidelity: Sequence[Part] = (),
) -> StepBudget:
    tokenizer = envelope.tokenizer or config.tokenizer
    texts = [*envelope.fixed, *(s.wrapper for s in envelope.slots)]
    size = sum(len(t.encode("utf-8")) for t in texts)
    slot_bounds = [bounds.get(s.variable) for s in envelope.slots]
    cheap_max = (
        size
        + envelope.overhead_tokens
        + envelope.output_tokens
        + sum(b.tokens or 0 for b in slot_bounds if b is not None)
        + sum(p.tokens or 0 for p in fidelity)
    )
    # The byte bound decides when the fixed text cannot fill the window and either a part
    # is unbounded (a warning needs no count) or every part fits; only an undecided step
    # pays for the tokenizer.
    all_bounded = (
        not envelope.unbounded
        and all(b is not None and b.tokens is not None for b in slot_bounds)
        and all(p.tokens is not None for p in fidelity)
    )
    cheap_min = size + envelope.overhead_tokens + envelope.output_tokens
    window = config.context_window
    policy = _policy(step, settings, config, envelope.output_tokens)
    # What a policy may not summarise, by bytes: when that may be over its budget, count.
    cheap_hard = (
        size
        + envelope.overhead_tokens
        + sum(
            b.tokens or 0
            for s, b in zip(envelope.slots, slot_bounds, strict=True)
            if b is not None and not getattr(s, "summarizable", True)
        )
        + sum(p.tokens or 0 for p in fidelity if not p.summarisable)
    )
    counted = (
        exact
        or cheap_min > window
        or (all_bounded and cheap_max > window)
        or (policy is not None and cheap_hard > policy["budget"])
    )
    if counted:
        from runtime.context.tokens import get_counter

        # The model's server is not asked before a run: cl100k_base estimates its count,
        # and the report says so (docs/models.md: it counted 1.00-1.30 times more).
        count = get_counter("cl100k_base" if tokenizer == "server" else tokenizer).count
    else:
        count = _byte_count
    fixed = sum(count(t) for t in envelope.fixed) + envelope.overhead_tokens
    parts = []
    for slot, bound in zip(envelope.slots, slot_bounds, strict=True):
        keep = bool(getattr(slot, "summarizable", True))
        if bound is None:
            why = f"{slot.variable}: an undeclared input or set at run time, unbounded"
            parts.append(Part(slot.label, slot.variable, None, why, summarisable=keep))
        elif bound.tokens is None:
            parts.append(Part(slot.label, slot.variable, None, bound.why, summarisable=keep))
        else:
            extra = count(slot.wrapper) if slot.wrapper else 0
            tokens = bound.tokens + extra
            parts.append(Part(slot.label, slot.variable, tokens, bound.why, summarisable=keep))
    parts += [Part(label, "", None, "no static bound") for label in envelope.unbounded]
    parts += fidelity
    return StepBudget(
        step_id=str(step.get("id", "?")),
        index=index,
        model=model,
        window=config.context_window,
        tokenizer=SERVER_ESTIMATE if tokenizer == "server" else tokenizer,
        fixed_tokens=fixed,
        output_tokens=envelope.output_tokens,
        parts=parts,
        guard=_guard(step, settings),
        exact=counted,
        policy=policy,
    )


SERVER_ESTIMATE = "server (estimated with cl100k_base)"


def _byte_count(text: str) -> int:
    return len(text.encode("utf-8"))


def _policy(
    step: Mapping[str, Any], settings: Mapping[str, Any], config: Any, output: int
) -> dict[str, Any] | None:
    """The step's context policy as a run applies it: budget, reserve, floor (None: none)."""
    from runtime.context.policy import model_profile, policy_config

    cfg = policy_config(settings, step)
    if not cfg.enabled and not step.get("context_policy") and not settings.get("context_policy"):
        return None
    margin = getattr(config, "token_margin", 0.0) or 0.0
    profile = (
        model_profile(config.name, config.context_window, output, cfg, margin)
        if margin
        else model_profile(config.name, config.context_window, output, cfg)
    )
    return {
        "enabled": cfg.enabled and not cfg.dry_run,
        "dry_run": cfg.dry_run,
        "budget": profile.budget,
        "reserve": profile.reserve,
        "floor": profile.floor,
        "summary_tokens": cfg.summary_tokens,
    }


def _guard(step: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """What handles an overflow at run time: a context policy, a catch, or nothing."""
    from runtime.context.policy import policy_config

    policy = policy_config(settings, step)  # the step's over the settings', as at run time
    if policy.enabled and not policy.dry_run:  # a dry run changes no prompt
        return "context_policy"
    catch = mapping(step.get("catch"))
    for code in _OVERFLOW_CODES:
        if code in catch:
            return f"catch {code}"
    return ""


def check_budgets(
    steps: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    registry: Registry,
    pipeline: PipelineView,
    inputs: Any = None,
    *,
    base_dir: str | None = None,
) -> Iterator[Finding]:
    """BUDGET_IMPOSSIBLE and BUDGET_MAY_OVERFLOW findings, positioned at each model step."""
    for b in envelopes(steps, settings, registry, pipeline, inputs, exact=False, base_dir=base_dir):
        path = ("steps", b.index, "id")
        where = f"step {b.step_id!r} on {b.model} ({b.window}-token window)"
        status = b.status
        if b.policy is not None and b.policy["enabled"] and status != "impossible":
            yield from _policy_findings(b, where, path)
            yield from _way_back(b, steps, where, path)
        if status == "impossible":
            yield Finding(
                "BUDGET_IMPOSSIBLE",
                f"{where}: the fixed prompt ({b.fixed_tokens} tokens) and the reserved output "
                f"({b.output_tokens}) need {b.minimum} tokens before any variable part",
                path,
            )
        elif b.policy_cannot_fit:
            continue  # an error already says it
        elif status in ("unbounded", "may_overflow") and not b.guard:
            if status == "unbounded":
                # A transition's `fidelity: full` is warned at the transition's line.
                for p in b.unbounded:
                    if p.at:
                        yield Finding(
                            "BUDGET_MAY_OVERFLOW",
                            f"{where}: {p.why}, which no static bound limits",
                            p.at,
                            hint=f"Set a context_policy on step {b.step_id!r} or catch "
                            "CONTEXT_OVERFLOW there (`runtime budget PIPELINE`).",
                            severity="warning",
                        )
                here = [p for p in b.unbounded if not p.at]
                if not here:
                    continue
                names = ", ".join(f"{p.label} ({p.why})" for p in here)
                message = f"{where}: the prompt has unbounded parts: {names}"
            else:
                largest = sorted(b.parts, key=lambda p: -(p.tokens or 0))[:3]
                names = ", ".join(f"{p.label} up to {p.tokens}" for p in largest)
                message = (
                    f"{where}: the prompt may reach {b.bounded_maximum} tokens "
                    f"with its output ({names})"
                )
            yield Finding("BUDGET_MAY_OVERFLOW", message, path, severity="warning")


def _policy_findings(b: StepBudget, where: str, path: tuple[str | int, ...]) -> Iterator[Finding]:
    """What a context policy cannot fix: its floor, and the parts it may not summarise."""
    policy = b.policy or {}
    budget, floor = policy["budget"], policy["floor"]
    if budget < floor:
        yield Finding(
            "POLICY_BUDGET_UNDER_FLOOR",
            f"{where}: the context policy's prompt budget {budget} (reserve {policy['reserve']}) "
            f"is under its emergency_floor {floor}, so a prompt over it is rejected, never "
            "summarised",
            path,
            hint="Raise prompt_budget (or the window, or lower response_reserve) to at least "
            "emergency_floor, or lower emergency_floor.",
            severity="warning",
        )
    hard = [p for p in b.parts if not p.summarisable]
    if b.policy_cannot_fit:
        named = ", ".join(f"{p.label} up to {p.tokens}" for p in hard if p.tokens is not None)
        yield Finding(
            "BUDGET_POLICY_CANNOT_FIT",
            f"{where}: what the context policy may not summarise needs up to "
            f"{b.unsummarisable_maximum} tokens (fixed text and framing {b.fixed_tokens}"
            f"{', ' + named if named else ''}), over its {budget}-token prompt budget "
            f"(reserve {policy['reserve']})",
            path,
        )
    loose = [p for p in hard if p.tokens is None]
    if loose:
        names = ", ".join(f"{p.label} ({p.why})" for p in loose)
        yield Finding(
            "BUDGET_MAY_OVERFLOW",
            f"{where}: the context policy may not summarise {names}, and nothing bounds it",
            path,
            hint="Give the input a maxLength, or mark the part `summarizable: true` if it may "
            "be summarised (`runtime budget PIPELINE`).",
            severity="warning",
        )


def _way_back(
    b: StepBudget, steps: Sequence[Mapping[str, Any]], where: str, path: tuple[str | int, ...]
) -> Iterator[Finding]:
    """POLICY_NO_WAY_BACK: the policy may elide parts and nothing can bring them back.

    A way back is the rehydrate tool offered to the model, or a part's `pointer_to`
    variable that a rehydrate step reads (`pointer_id_from`).
    """
    step = steps[b.index]
    tools = step.get("tools")
    if isinstance(tools, Mapping):
        tools = tools.get("from")
    if isinstance(tools, list) and any(
        t == "rehydrate" or (isinstance(t, Mapping) and t.get("name") == "rehydrate") for t in tools
    ):
        return
    elidable = [p.label for p in b.parts if p.summarisable]
    # A prompt that always fits its budget is never summarised (compaction aside, which
    # acts on a thread or history: unbounded parts, so the status is not "fits").
    fits = b.status == "fits" and b.bounded_maximum - b.output_tokens <= (b.policy or {})["budget"]
    if not elidable or fits:
        return
    parts = mapping(step.get("user_parts"))
    targets = {mapping(p).get("pointer_to") for p in parts.values()} - {None}
    readers = {s.get("pointer_id_from") for s in steps if s.get("action") == "rehydrate"}
    if targets & readers:
        return
    yield Finding(
        "POLICY_NO_WAY_BACK",
        f"{where}: its context policy may put {', '.join(elidable)} behind pointers, and "
        "nothing can bring them back: the model is offered no rehydrate tool and no rehydrate "
        "step reads a pointer_to of its parts",
        path,
        hint="Offer the tool (`tools: [rehydrate]`), or give the part `pointer_to: VAR` and "
        "add a rehydrate step with `pointer_id_from: VAR` (docs/budget.md).",
        severity="warning",
    )
