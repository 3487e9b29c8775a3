"""finalize: build the final answer and end the run."""

from __future__ import annotations

from runtime.contract.action import Action, Outcome, StepContext
from runtime.errors import StateError


def _older_engine_answers(ctx: StepContext) -> list[str]:
    """The older engine's answer variables that hold text, the translation first when asked."""
    wanted = ["answer_neutral"]
    if ctx.get("translate_chat", False) is True:
        wanted.insert(0, "answer_translated")
    # Its pipelines reset answer_translated to null: only text counts as an answer.
    return [name for name in wanted if isinstance(ctx.get(name, None), str)]


class Finalize(Action):
    """Write `final_answer` from `source` (else answer, the older engine's answer variables,
    last_model_response) and stop."""

    name = "finalize"
    summary = "Build the final answer and end the run."
    fields = {
        "source": {"type": "string", "description": "Variable holding the answer."},
        "persist_turn": {
            "type": "boolean",
            "description": "Older engine field (store the turn in its chat history); accepted "
            "and ignored: every run is kept in the run store.",
        },
    }
    reads = (
        "answer",
        "answer_translated",
        "answer_neutral",
        "translate_chat",
        "last_model_response",
    )
    writes = ("final_answer",)
    terminal = True
    runnable = True

    def run(self, ctx: StepContext) -> Outcome | None:
        """Copy the answer and end."""
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
        raise StateError(
            f"no answer to finalize: none of {', '.join(tried)} is set", code="VARIABLE_MISSING"
        )
