"""finalize: build the final answer and end the run."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.contract.action import Action, Outcome, StepContext, VariableRead
from runtime.errors import StateError

# Where the answer comes from when the step names no `source`, in the order they are tried
# (answer_translated only when translate_chat is true; the older engine's variables only
# when they hold text).
ANSWER_SOURCES = ("answer", "answer_translated", "answer_neutral", "last_model_response")


def _older_engine_answers(ctx: StepContext) -> list[str]:
    """The older engine's answer variables that hold text, the translation first when asked."""
    wanted = ["answer_neutral"]
    if ctx.get("translate_chat", False) is True:
        wanted.insert(0, "answer_translated")
    # Its pipelines reset answer_translated to null: only text counts as an answer.
    return [name for name in wanted if isinstance(ctx.get(name, None), str)]


class Finalize(Action):
    """Write `final_answer` from `source` (else answer, the older engine's answer variables,
    last_model_response) and stop; with none set, `final_answer` is null unless
    `require_answer` is true."""

    name = "finalize"
    summary = "Build the final answer and end the run."
    fields = {
        "source": {"type": "string", "description": "Variable holding the answer."},
        "require_answer": {
            "type": "boolean",
            "description": "Fail with VARIABLE_MISSING when no answer source is set. Default "
            "false: the run completes with final_answer null and a NO_ANSWER trace warning.",
        },
        "persist_turn": {
            "type": "boolean",
            "description": "Older engine field (store the turn in its chat history); accepted "
            "and ignored: every run is kept in the run store.",
        },
    }
    reads = (*ANSWER_SOURCES, "translate_chat")
    writes = ("final_answer",)
    terminal = True
    runnable = True

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`source`, else any one of the default answer sources."""
        if isinstance(step.get("source"), str):
            yield VariableRead((step["source"],), ("source",))
        else:
            yield VariableRead(ANSWER_SOURCES, (), "the default answer sources: no `source`")

    def run(self, ctx: StepContext) -> Outcome | None:
        """Copy the answer and end; with none, end with a null answer (or fail if required)."""
        if "source" in ctx.step:
            names = [ctx.step["source"]]
        else:
            names = ["answer", *_older_engine_answers(ctx), "last_model_response"]
        for name in names:
            if ctx.has(name):
                ctx.set("final_answer", ctx.get(name))
                return Outcome.end()
        tried = (
            names if "source" in ctx.step else ["answer", "answer_neutral", "last_model_response"]
        )
        message = f"no answer to finalize: none of {', '.join(tried)} is set"
        if ctx.step.get("require_answer") is True:
            raise StateError(message, code="VARIABLE_MISSING")
        # A run whose answer is missing still completed every step: it ends completed, with
        # the answer null, and the trace says why (`runtime validate` warns before a run).
        ctx.set("final_answer", None)
        ctx.trace("NO_ANSWER", severity="warning", message=message, tried=tried)
        return Outcome.end()
