"""translate_out_if_needed: the answer in the user's language when the run asks for it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions import _translate
from runtime.contract.action import Action, Outcome, Problem, StepContext, VariableRead

RULES = (
    "Keep the Markdown structure exactly (headings, lists, tables, blank lines); keep code "
    "blocks, inline code, URLs, file paths and identifiers unchanged. Reply with the "
    "translated Markdown only, nothing else."
)
TO_LANGUAGE = "Translate the Markdown document between <<<MARKDOWN and MARKDOWN into {language}. "
TO_QUESTION = (
    "Translate the Markdown document between <<<MARKDOWN and MARKDOWN into the language the "
    "question between <<<QUESTION and QUESTION is written in (do not answer the question). "
)


class TranslateOutIfNeeded(Action):
    """Write the answer for the user: translated when the run asks for it."""

    name = "translate_out_if_needed"
    summary = "Translate the answer into the user's language when the run asks for it."
    fields = {
        "source": {
            "type": "string",
            "description": "Variable with the answer (default answer_neutral).",
        },
        "target": {
            "type": "string",
            "description": "Variable to write (default answer_translated).",
        },
        "target_language": {
            "type": "string",
            "minLength": 1,
            "description": "Language code to translate into (default: the language of "
            "the question in `question_from`).",
        },
        "question_from": {
            "type": "string",
            "description": "Variable with the user's question as asked (default user_query).",
        },
        **_translate.FIELDS,
    }
    reads = ("answer_neutral", "translate_chat", "user_query")
    writes = ("answer_translated",)
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """The translator the step would use is configured."""
        return _translate.check_translator(step, settings)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`source` (default answer_neutral); the question when no target_language is given."""
        yield VariableRead.named(step, "source", "answer_neutral")
        if not isinstance(step.get("target_language"), str):
            yield VariableRead.named(step, "question_from", "user_query")

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """`target` (default answer_translated)."""
        yield VariableRead.named(step, "target", "answer_translated").names[0]

    def run(self, ctx: StepContext) -> Outcome | None:
        """Translate when translate_chat is true and there is an answer."""
        source = ctx.step.get("source", "answer_neutral")
        target = ctx.step.get("target", "answer_translated")
        if ctx.get("translate_chat", False) is not True:
            return self._note(ctx, target, "translate_chat is not true")
        text = _translate.text_of(ctx, source, required=False)
        if text is None or not text.strip():
            return self._note(ctx, target, f"{source!r} holds no answer")
        provider, chosen = _translate.translator(ctx)
        if provider is None:
            # Asked for a translation and none can be made: the answer as it is, said so.
            ctx.set(target, text)
            return self._note(ctx, target, chosen)
        wanted = ctx.step.get("target_language")
        if isinstance(wanted, str):
            builtin = TO_LANGUAGE.format(language=_translate.language_name(wanted)) + RULES
            user = f"<<<MARKDOWN\n{text}\nMARKDOWN"
        else:
            question = _translate.text_of(
                ctx, ctx.step.get("question_from", "user_query"), required=True
            )
            builtin = TO_QUESTION + RULES
            user = f"<<<QUESTION\n{question}\nQUESTION\n<<<MARKDOWN\n{text}\nMARKDOWN"
        prompt = _translate.system_prompt(ctx, builtin)
        if "translate_prompt_key" in ctx.step:
            user = _translate.wrap(prompt, text)  # the prompt file says how its input comes
        reply = _translate.translate(ctx, provider, prompt, user, text)
        if reply is None:
            ctx.set(target, text)
            return self._note(ctx, target, f"{chosen} returned no translation")
        ctx.set(target, reply)
        ctx.trace("TRANSLATE", direction="out", translated=True, model=chosen, target=target)
        return None

    @staticmethod
    def _note(ctx: StepContext, target: str, reason: str) -> None:
        """The trace note of an answer left untranslated."""
        ctx.trace("TRANSLATE", direction="out", translated=False, reason=reason, target=target)
        return None
