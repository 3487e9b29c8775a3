"""rehydrate: put the original behind a context pointer (or an exact slice of it) into a variable."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions import _summarisers  # noqa: F401  (pointers may hold summarised code)
from runtime.context.pointers import SliceTooLarge, _shown, max_token_bytes, rehydrate
from runtime.contract.action import (
    VARIABLE_PATTERN,
    Action,
    Outcome,
    Problem,
    StepContext,
    VariableRead,
)
from runtime.contract.tool import ToolFace
from runtime.errors import RunError

_VARIABLE = {"type": "string", "pattern": VARIABLE_PATTERN}


class Rehydrate(Action):
    """Read a pointer id (and slice) from the step or a variable; write the exact text to target."""

    name = "rehydrate"
    summary = "Bring back the original (or a slice) behind a context pointer, within a budget."
    fields = {
        "pointer_id": {
            "type": "string",
            "pattern": "^ptr-[0-9a-f]{16}$",
            "description": "The pointer (ptr- and 16 hex digits), as the prompt showed it.",
        },
        "pointer_id_from": {
            **_VARIABLE,
            "description": "Variable holding the pointer id, or an object {pointer_id, slice} "
            "(e.g. a model's JSON reply).",
        },
        "slice": {
            "type": "string",
            "minLength": 1,
            "description": "`lines A-B`, a JSON path such as `$.items[3]`, or `hunk N`; "
            "default: the whole original.",
        },
        "slice_from": {**_VARIABLE, "description": "Variable holding the slice."},
        "target": {**_VARIABLE, "description": "Variable the text is written to."},
        "max_tokens": {
            "type": "integer",
            "minimum": 1,
            "description": "Most tokens the text may take (default settings.max_context_tokens; "
            "else no limit). Larger: REHYDRATE_OVER_BUDGET.",
        },
    }
    tool = ToolFace(
        name="rehydrate",
        description=(
            "Fetch the exact original behind a pointer (a block marked as elided), whole or "
            "a slice of it."
        ),
        parameters={
            "type": "object",
            "properties": {
                "pointer_id": {"type": "string", "description": "The pointer's id."},
                "slice": {
                    "type": "string",
                    "description": "Optional: `lines A-B`, a JSON path such as `$.items[3]`, "
                    "or `hunk N` of a diff; omit for the whole original.",
                },
            },
            "required": ["pointer_id"],
            "additionalProperties": False,
        },
        # Run by actions/_tools.py itself: a slice is cut to the room left in the prompt.
        result=("text",),
        safety=("read_only",),
        access="rehydrate",
    )
    required = ("target",)
    reads_settings = ("max_context_tokens", "tokenizer")
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Exactly one of pointer_id and pointer_id_from; at most one of slice and slice_from."""
        given = [k for k in ("pointer_id", "pointer_id_from") if k in step]
        if len(given) != 1:
            yield Problem(
                "SCHEMA_INVALID",
                "rehydrate needs exactly one of pointer_id and pointer_id_from",
                (given[-1],) if given else ("action",),
            )
        if "slice" in step and "slice_from" in step:
            yield Problem("SCHEMA_INVALID", "give slice or slice_from, not both", ("slice_from",))

    @classmethod
    def output_bounds(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, int]:
        """The target holds at most max_tokens (default settings.max_context_tokens) tokens."""
        target = step.get("target")
        limit = step.get("max_tokens", settings.get("max_context_tokens"))
        return {target: limit} if isinstance(target, str) and isinstance(limit, int) else {}

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`pointer_id_from` and `slice_from`, when given."""
        for key in ("pointer_id_from", "slice_from"):
            if isinstance(step.get(key), str):
                yield VariableRead((step[key],), (key,))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """`target`."""
        if isinstance(step.get("target"), str):
            yield step["target"]

    def run(self, ctx: StepContext) -> Outcome | None:
        """Look the pointer up in the run's store, cut the slice, check the budget, write."""
        step = ctx.step
        part = step.get("slice")
        if "pointer_id" in step:
            pointer_id = step["pointer_id"]
        else:
            value = ctx.get(step["pointer_id_from"])
            if isinstance(value, Mapping):
                pointer_id, part = value.get("pointer_id"), value.get("slice", part)
            else:
                pointer_id = value
        if "slice_from" in step:
            part = ctx.get(step["slice_from"])
        if not isinstance(pointer_id, str) or (part is not None and not isinstance(part, str)):
            raise RunError(
                f"step {ctx.step_id!r}: the pointer id must be a string and the slice a string "
                f"or absent (got {type(pointer_id).__name__}, {type(part).__name__})",
                code="VARIABLE_TYPE",
                step_id=ctx.step_id,
            )
        limit = step.get("max_tokens", ctx.settings.get("max_context_tokens"))
        counter = ctx.services.tokens() if limit is not None else None
        try:
            # Refused from a byte bound before the text is read whole or encoded.
            text = rehydrate(
                ctx,
                pointer_id.strip(),
                part,
                max_tokens=None if limit is None else int(limit),
                token_bytes=max_token_bytes(counter),
            )
        except SliceTooLarge as exc:
            raise RunError(
                f"step {ctx.step_id!r}: {pointer_id} {_shown(part or 'whole')}: {exc.message}",
                code="REHYDRATE_OVER_BUDGET",
                step_id=ctx.step_id,
            ) from exc
        except RunError as exc:
            if exc.step_id is None:
                exc.step_id = ctx.step_id
            raise
        tokens = None
        if counter is not None:
            tokens = counter.count(text)
            if tokens > int(limit):
                raise RunError(
                    f"step {ctx.step_id!r}: {pointer_id} {_shown(part or 'whole')} is {tokens} tokens, "
                    f"over the {limit}-token budget: ask for a smaller slice",
                    code="REHYDRATE_OVER_BUDGET",
                    step_id=ctx.step_id,
                )
        # Rehydration reads only an original this run stored (the pointer store is per run):
        # content the subject was already allowed to read. Recorded as an access decision.
        from actions._scope import run_subject
        from runtime.governance.access_policy import Decision, Ledger, decision_id

        subject = run_subject(ctx)
        ledger = Ledger("run", "rehydrate")
        ledger.add(
            [
                Decision(
                    decision_id("run", subject, "rehydrate", pointer_id, True),
                    "run",
                    "rehydrate",
                    True,
                    "an original this run stored from content it was allowed to read",
                    pointer_id,
                )
            ]
        )
        ctx.trace("ACCESS", **ledger.event())
        ctx.trace(
            "REHYDRATED",
            pointer_id=pointer_id,
            slice=part,
            chars=len(text),
            tokens=tokens,
            target=step["target"],
        )
        ctx.set(step["target"], text)
        return None
