"""translate_in_if_needed: the user's question in the language the model works in."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions import _translate
from runtime.contract.action import Action, Outcome, Problem, StepContext, VariableRead

BUILTIN_PROMPT = (
    "Translate the user's message into {language}. Reply with the translation only, nothing "
    "else. Keep code identifiers, file paths, SQL, and text in backticks or quotes unchanged."
)


class TranslateInIfNeeded(Action):
    """Write the question for the model: translated when the run asks for it, else as asked."""

    name = "translate_in_if_needed"
    summary = "Translate the user's question into the model's language when the run asks for it."
    fields = {
        "source": {
            "type": "string",
            "description": "Variable with the user's question (default user_query).",
        },
        "target": {
            "type": "string",
            "description": "Variable to write (default user_question_neutral).",
        },
        **_translate.FIELDS,
    }
    reads = ("user_query", "translate_chat")
    writes = ("user_question_neutral", "translate_chat")
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """The translator the step would use is configured."""
        return _translate.check_translator(step, settings)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`source` (default user_query); translate_chat may be absent (no translation)."""
        yield VariableRead.named(step, "source", "user_query")

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """`target` (default user_question_neutral) and translate_chat."""
        yield VariableRead.named(step, "target", "user_question_neutral").names[0]
        yield "translate_chat"

    def run(self, ctx: StepContext) -> Outcome | None:
        """Translate when translate_chat is true and the model language is not neutral."""
        source = ctx.step.get("source", "user_query")
        target = ctx.step.get("target", "user_question_neutral")
        text = _translate.text_of(ctx, source, required=True)
        assert text is not None
        language = str(ctx.settings.get("model_language") or "en")
        if language.lower() == "neutral":
            # The older engine's rule: a neutral model is never translated for, either way.
            ctx.set("translate_chat", False)
            return self._keep(ctx, target, text, "settings.model_language is neutral")
        if ctx.get("translate_chat", False) is not True:
            return self._keep(ctx, target, text, "translate_chat is not true")
        provider, chosen = _translate.translator(ctx)
        if provider is None:
            return self._keep(ctx, target, text, chosen)
        prompt = _translate.system_prompt(
            ctx, BUILTIN_PROMPT.format(language=_translate.language_name(language))
        )
        reply = _translate.translate(ctx, provider, prompt, _translate.wrap(prompt, text), text)
        if reply is None:
            return self._keep(ctx, target, text, f"{chosen} returned no translation")
        ctx.set(target, reply)
        ctx.trace("TRANSLATE", direction="in", translated=True, model=chosen, target=target)
        return None

    @staticmethod
    def _keep(ctx: StepContext, target: str, text: str, reason: str) -> None:
        """The question as asked, and the trace note saying it was not translated."""
        ctx.set(target, text)
        ctx.trace("TRANSLATE", direction="in", translated=False, reason=reason, target=target)
        return None
