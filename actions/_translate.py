"""Translation for translate_in_if_needed and translate_out_if_needed.

Which model translates: the step's `model:`, else the main model when the step says
`use_main_model: true`, else `settings.translator_model`. With none of them, or when the
chosen model is the offline extractive responder (which cannot translate), the text is
kept as it is and the trace says why: a translation is never pretended.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from actions import _redact
from actions._model_trace import trace_model_call
from runtime.contract.action import Problem, StepContext
from runtime.errors import ContextOverflowError, ModelError, RunError, StateError

# Per-message framing tokens of the chat format, as call_model counts them.
MESSAGE_OVERHEAD = 4
MIN_OUTPUT_TOKENS = 512
# A prompt that reads its input between `<<<NAME` and a closing `NAME` line (the older
# engine's translate_md_en_pl does) gets the text wrapped that way.
_MARKER = re.compile(r"<<<([A-Z][A-Z0-9_]*)")
# Replies that mean "I did not translate": nothing, or the older prompts' refusal word.
DECLINED = ("", "ERROR")
LANGUAGES = {
    "en": "English",
    "pl": "Polish",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "cs": "Czech",
    "uk": "Ukrainian",
}

FIELDS: dict[str, dict[str, Any]] = {
    "translate_prompt_key": {
        "type": "string",
        "minLength": 1,
        "description": "System prompt file of the translation (default: a built-in instruction).",
    },
    "use_main_model": {
        "type": "boolean",
        "description": "Translate with the main model (the CLI's --model, else "
        "settings.default_model).",
    },
    "model": {
        "type": "string",
        "minLength": 1,
        "description": "A named model from settings.models to translate with.",
    },
    "max_output_tokens": {
        "type": "integer",
        "minimum": 1,
        "description": "Reserved output tokens (default twice the text's tokens, at least 512).",
    },
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
}


def language_name(code: str) -> str:
    """A language code as words for a prompt ("en" -> "English")."""
    return LANGUAGES.get(code.lower(), f"the language with the code {code!r}")


def check_translator(step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
    """The model the step would translate with must be configured."""
    from runtime.models import config_from_spec

    if isinstance(step.get("model"), str):
        name, path = step["model"], ("model",)
    elif step.get("use_main_model") is True or not isinstance(
        settings.get("translator_model"), str
    ):
        return
    else:
        name, path = settings["translator_model"], ("action",)
    try:
        config_from_spec(name, settings)
    except ModelError as exc:
        where = "" if path == ("model",) else " (settings.translator_model)"
        yield Problem(exc.code, exc.message + where, path)


def translator(ctx: StepContext) -> tuple[Any, str]:
    """The provider to translate with and how it was chosen, or (None, why there is none)."""
    step, settings = ctx.step, ctx.settings
    if isinstance(step.get("model"), str):
        provider, chosen = ctx.services.model(step["model"]), f"step model {step['model']!r}"
    elif step.get("use_main_model") is True:
        provider, chosen = ctx.services.model(None), "the main model"
    elif isinstance(settings.get("translator_model"), str):
        name = settings["translator_model"]
        provider, chosen = ctx.services.model(name), f"settings.translator_model {name!r}"
    else:
        return None, (
            "no translator is configured (a step `model:`, `use_main_model: true` or "
            "settings.translator_model)"
        )
    if provider.config.provider == "extractive":
        return None, f"{chosen} is the offline extractive responder, which cannot translate"
    return provider, chosen


def text_of(ctx: StepContext, name: str, *, required: bool) -> str | None:
    """A state variable that must be text (or unset/null when not required)."""
    value = ctx.get(name) if required else ctx.get(name, None)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise StateError(
            f"{name!r} must be text to translate, got {type(value).__name__}",
            code="VARIABLE_TYPE",
        )
    return value


def system_prompt(ctx: StepContext, builtin: str) -> str:
    """The translation prompt: the file named by translate_prompt_key, else the built-in one."""
    key = ctx.step.get("translate_prompt_key")
    if not isinstance(key, str):
        return builtin
    path = ctx.pipeline.prompt_path(key)
    if path is None:
        raise RunError(
            f"prompt {key!r} not found under {ctx.pipeline.prompts_dir}", code="PROMPT_NOT_FOUND"
        )
    return str(path.read_text(encoding="utf-8").strip())


def wrap(prompt: str, text: str) -> str:
    """The text delimited the way the prompt says its input comes, else as it is."""
    for name in _MARKER.findall(prompt):
        if re.search(rf"(?m)^{name}\s*$", prompt):
            return f"<<<{name}\n{text}\n{name}"
    return text


def translate(ctx: StepContext, provider: Any, prompt: str, user: str, text: str) -> str | None:
    """Ask the model; its reply, or None when it declined (an empty reply or ERROR)."""
    from runtime.models import ModelRequest

    messages = [{"role": "system", "content": prompt}, {"role": "user", "content": user}]
    mask = _redact.masking(ctx)  # issue 28: settings.redact covers the translator too
    if mask is not None:
        messages = mask.messages(messages)
        mask.trace()
    counter = ctx.services.tokens_for(provider.config)
    prompt_tokens = sum(counter.count(m["content"]) + MESSAGE_OVERHEAD for m in messages)
    if "max_output_tokens" in ctx.step:
        reserve = int(ctx.step["max_output_tokens"])
    else:
        # A translation is about as long as its source; twice that leaves room for languages
        # whose words cost more tokens.
        reserve = max(MIN_OUTPUT_TOKENS, 2 * counter.count(text))
    from runtime.context.policy import PolicyConfig, model_profile

    config = provider.config
    window, margin = config.context_window, config.token_margin
    if prompt_tokens > model_profile(config.name, window, reserve, PolicyConfig(), margin).budget:
        raise ContextOverflowError(
            f"translation prompt {prompt_tokens} tokens + {reserve} reserved for output exceeds "
            f"the {window}-token window of {config.name}"
            + (f" (token_margin {margin:g})" if margin else "")
        )
    request = ModelRequest(
        messages=messages,
        model=provider.config.model,
        max_output_tokens=reserve,
        temperature=ctx.step.get("temperature"),
        step_id=ctx.step_id,
        metadata={"run_id": ctx.run_id},
    )
    response = provider.complete(request)
    trace_model_call(ctx, provider, response, prompt_tokens, messages)
    reply = response.text.strip()
    return None if reply in DECLINED else reply
