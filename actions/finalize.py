"""finalize: build the final answer and end the run."""

from __future__ import annotations

from runtime.contract.action import Action, Outcome, StepContext
from runtime.errors import StateError


class Finalize(Action):
    """Write `final_answer` from `source` (else answer, else last_model_response) and stop."""

    name = "finalize"
    summary = "Build the final answer and end the run."
    fields = {"source": {"type": "string", "description": "Variable holding the answer."}}
    reads = ("answer", "last_model_response")
    writes = ("final_answer",)
    terminal = True
    runnable = True

    def run(self, ctx: StepContext) -> Outcome | None:
        """Copy the answer and end."""
        names = [ctx.step["source"]] if "source" in ctx.step else ["answer", "last_model_response"]
        for name in names:
            if ctx.has(name):
                ctx.set("final_answer", ctx.get(name))
                return Outcome.end()
        raise StateError(
            f"no answer to finalize: none of {', '.join(names)} is set", code="VARIABLE_MISSING"
        )
