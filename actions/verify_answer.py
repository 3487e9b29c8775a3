"""verify_answer: check an answer's citations against what its model was shown (issue 29)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from runtime.contract.action import (
    VARIABLE_PATTERN,
    Action,
    Outcome,
    Problem,
    StepContext,
    VariableRead,
)
from runtime.errors import StateError

POLICIES = ("block", "warn", "annotate")
MAX_EXEMPT_CHARS = 200
BLOCKED = (
    "The answer was withheld: it could not be checked against the evidence its model was "
    "shown ({what}). The details are in {record}."
)


def _what(verdict: Mapping[str, Any]) -> str:
    """`2 citations name nothing shown; 1 claim has no citation`, from a verdict's counts."""
    counts = verdict["counts"]
    parts = []
    if counts["unknown_citations"]:
        n = counts["unknown_citations"]
        parts.append(f"{n} citation{'s' * (n != 1)} name{'s' * (n == 1)} nothing it was shown")
    if counts["unsupported"]:
        n = counts["unsupported"]
        parts.append(f"{n} claim{'s' * (n != 1)} {'have' if n != 1 else 'has'} no citation")
    if verdict["unnamed_summaries"]:
        n = len(verdict["unnamed_summaries"])
        parts.append(f"{n} summar{'ies' if n != 1 else 'y'} name{'s' * (n == 1)} no original")
    return "; ".join(parts)


class VerifyAnswer(Action):
    """Every citation must name a shown item; every claim must cite; summaries name their
    originals. The verdict goes to `result_to`; `on_fail` blocks, warns or annotates."""

    name = "verify_answer"
    summary = "Check that an answer cites only what its model was shown, and cites its claims."
    fields = {
        "answer_from": {
            "type": "string",
            "pattern": VARIABLE_PATTERN,
            "description": "Variable holding the answer (default last_model_response).",
        },
        "shown_from": {
            "type": "string",
            "pattern": VARIABLE_PATTERN,
            "description": "Variable holding what the answering call was shown: the record a "
            "call_model step's `shown_to` writes.",
        },
        "result_to": {
            "type": "string",
            "pattern": VARIABLE_PATTERN,
            "description": "Variable that gets the verdict {ok, unsupported, "
            "unknown_citations, unnamed_summaries, citations, counts} (default "
            "answer_verification).",
        },
        "on_fail": {
            "enum": list(POLICIES),
            "description": "What a failed verification does to the answer: block (replace it "
            "by a notice that it was withheld; the default), warn (keep it; a warning in the "
            "trace, printed by runtime exec) or annotate (keep it with the warning appended).",
        },
        "exempt": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_EXEMPT_CHARS},
            "description": "Regular expressions: a sentence one of them finds is no claim "
            "(boilerplate of the pipeline's own prompts).",
        },
        "on_verified": {"type": "string", "description": "Step for a verified answer."},
        "on_unverified": {
            "type": "string",
            "description": "Step for an answer that failed (after on_fail was applied).",
        },
    }
    required = ("shown_from",)
    outcomes = ("verified", "unverified")
    writes = ("answer_verification",)
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Each `exempt` pattern compiles; the answer and the record are two variables."""
        exempt = step.get("exempt")
        for i, pattern in enumerate(exempt if isinstance(exempt, list) else ()):
            if not isinstance(pattern, str):
                continue
            try:
                re.compile(pattern)
            except re.error as exc:
                yield Problem(
                    "VERIFY_PATTERN_INVALID",
                    f"exempt[{i}] is not a regular expression: {exc}",
                    ("exempt", i),
                )
        answer = step.get("answer_from", "last_model_response")
        for key in ("shown_from", "result_to"):
            if step.get(key) == answer:
                yield Problem(
                    "VERIFY_VARIABLES_CLASH",
                    f"{key} names {answer!r}, the variable holding the answer",
                    (key,),
                    hint="the answer, what its model was shown and the verdict are three variables",
                )

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`answer_from` (default last_model_response) and `shown_from`."""
        yield VariableRead.named(step, "answer_from", "last_model_response")
        if isinstance(step.get("shown_from"), str):
            yield VariableRead((step["shown_from"],), ("shown_from",))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """`result_to`, and the answer variable when on_fail may rewrite it."""
        yield str(step.get("result_to", "answer_verification"))
        if step.get("on_fail", "block") != "warn":
            yield str(step.get("answer_from", "last_model_response"))

    def run(self, ctx: StepContext) -> Outcome | None:
        """Verify, record the verdict, apply on_fail, route."""
        from runtime.models.citations import record_problems, verify

        source = ctx.step.get("answer_from", "last_model_response")
        answer = ctx.get(source)
        if not isinstance(answer, str):
            raise StateError(
                f"{source} holds {type(answer).__name__}, not the answer's text",
                code="VARIABLE_TYPE",
            )
        shown = ctx.get(ctx.step["shown_from"])
        problem = record_problems(shown)
        if problem is not None:
            raise StateError(
                f"{ctx.step['shown_from']}: {problem} (a call_model step's shown_to writes one)",
                code="VARIABLE_TYPE",
            )
        verdict = verify(answer, shown, ctx.step.get("exempt") or ())
        policy = ctx.step.get("on_fail", "block")
        record = ctx.step.get("result_to", "answer_verification")
        data: dict[str, Any] = {
            "ok": verdict["ok"],
            "policy": policy,
            "unsupported": verdict["counts"]["unsupported"],
            "unknown_citations": verdict["counts"]["unknown_citations"],
            "unnamed_summaries": len(verdict["unnamed_summaries"]),
            "claims": verdict["counts"]["claims"],
            "citations": len(verdict["citations"]),
        }
        if not verdict["ok"]:
            what = _what(verdict)
            verdict["policy"] = policy
            if policy == "block":
                verdict["withheld"] = answer
                ctx.set(source, BLOCKED.format(what=what, record=record))
                data["warning"] = f"answer withheld: {what}"
            elif policy == "annotate":
                ctx.set(source, f"{answer}\n\n(Unverified: {what}; see {record}.)")
                data["warning"] = f"answer unverified: {what}"
            else:
                data["warning"] = f"answer unverified: {what}"
        ctx.set(record, verdict)
        ctx.trace("VERIFY_ANSWER", **data)
        return Outcome.to_branch("verified" if verdict["ok"] else "unverified")
