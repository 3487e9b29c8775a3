"""The boundary where model replies and errors leave the model layer: secrets scrubbed.

Every provider `resolve_provider` builds is wrapped in `ScrubbingProvider`, so what a
run stores, records and prints of a model call (the reply text, each streamed piece, the
model name and finish reason, each tool call's id, name and arguments, an error's
message, hint and details) never holds a configured secret in any form the scrubber
knows (`runtime.net.secrets`), whichever provider answered: a
live server that echoes the key it was sent, or a cassette recorded before the key was
scrubbed. The secrets are the values of every `api_key_env` in `settings.models`, the
chosen model's, and `OPENAI_API_KEY`, read at each call (a rotated key is scrubbed too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from runtime.contract.text import describe, invalid_text, surrogate_at
from runtime.errors import ModelProviderError, StepRuntimeError
from runtime.models.base import (
    ChunkCallback,
    ModelConfig,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from runtime.net.secrets import DEFAULT_KEY_ENV, Scrubber, env_secrets


def key_variables(settings: Mapping[str, Any], config: ModelConfig | None = None) -> list[str]:
    """The environment variables holding API keys: every model's api_key_env and the default."""
    names = [DEFAULT_KEY_ENV]
    if config is not None:
        names.append(config.api_key_env)
    models = settings.get("models")
    if isinstance(models, Mapping):
        for entry in models.values():
            env = entry.get("api_key_env") if isinstance(entry, Mapping) else None
            if isinstance(env, str):
                names.append(env)
    return list(dict.fromkeys(names))


def scrubber_for(settings: Mapping[str, Any], config: ModelConfig | None = None) -> Scrubber:
    """A scrubber holding the current values of every configured key."""
    return Scrubber(env_secrets(key_variables(settings, config)))


def scrubbed(response: ModelResponse, scrub: Scrubber) -> ModelResponse:
    """response with every string in it scrubbed, in fields and lists alike (counts are ints).

    A tool call's id, name and raw JSON arguments are scrubbed as text: the scrubber knows
    every JSON escape of every character (docs/guarantees.md), so the arguments a tool
    decodes hold no secret either.
    """
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(response):
        value = getattr(response, field.name)
        if field.name == "tool_calls":
            changes[field.name] = [
                ToolCall(scrub.text(c.id), scrub.text(c.name), scrub.text(c.arguments))
                for c in value
            ]
        elif isinstance(value, str):
            changes[field.name] = scrub.text(value)
        elif isinstance(value, dict | list):  # anything a provider added, e.g. retry reasons
            changes[field.name] = scrub.data(value)
    return dataclasses.replace(response, **changes)


def _quoted(text: str) -> str:
    """text with any lone surrogate written as its escape (`\\ud800`), so it can be printed."""
    if surrogate_at(text) < 0:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _not_text(where: str, problem: str) -> ModelProviderError:
    return ModelProviderError(f"the reply's {where} is not valid Unicode text: {problem}")


def _refuse_invalid_text(response: ModelResponse) -> None:
    """MODEL_PROVIDER_ERROR when any string of response holds a lone surrogate."""
    for field in dataclasses.fields(response):
        value = getattr(response, field.name)
        if field.name == "tool_calls":
            for n, call in enumerate(value):
                for part in ("id", "name", "arguments"):
                    text = getattr(call, part)
                    if (index := surrogate_at(text)) >= 0:
                        raise _not_text(f"tool call {n}'s {part}", describe(text, index))
        elif isinstance(value, str | dict | list):
            problem = invalid_text(value)
            if problem is not None:
                raise _not_text(field.name.replace("_", " "), problem)


class _CheckedStream:
    """Passes streamed pieces on, refusing one that holds a lone surrogate before it is shown."""

    def __init__(self, sink: ChunkCallback) -> None:
        self._sink = sink
        self._seen = 0  # characters passed on so far: positions count from the reply's start

    def feed(self, piece: str) -> None:
        """Pass piece on, or raise MODEL_PROVIDER_ERROR naming its surrogate's position."""
        index = surrogate_at(piece)
        if index >= 0:
            raise _not_text("text", describe(piece, index, before=self._seen))
        self._seen += len(piece)
        self._sink(piece)


class ScrubbingProvider:
    """Wraps a provider: replies, streamed pieces and errors come out without any secret."""

    def __init__(self, inner: ModelProvider, settings: Mapping[str, Any]) -> None:
        self.inner = inner
        self.config = inner.config
        self.settings = settings
        self.restorable_state = inner.restorable_state

    def scrubber(self) -> Scrubber:
        """The scrubber for this call (keys are read now, as the provider reads them)."""
        return scrubber_for(self.settings, self.config)

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """The inner provider's answer, scrubbed; a key split across pieces is held back.

        A reply holding text that is not valid Unicode (a lone surrogate: JSON's `\\ud800`
        without its pair) is MODEL_PROVIDER_ERROR naming the field and the position, also
        mid-stream before the piece is shown: no UTF-8 store, cassette or terminal holds it.
        """
        scrub = self.scrubber()
        held = scrub.stream(on_chunk) if on_chunk is not None and scrub else None
        sink = held.feed if held is not None else on_chunk
        checked = _CheckedStream(sink).feed if sink is not None else None
        try:
            response = self.inner.complete(request, on_chunk=checked)
            if held is not None:
                held.flush()
            _refuse_invalid_text(response)
        except StepRuntimeError as exc:
            # In place: the error keeps its class, code and cause.
            exc.message = _quoted(scrub.text(exc.message))
            exc.args = (exc.message,)
            exc.hint = _quoted(scrub.text(exc.hint)) if exc.hint else exc.hint
            exc.details = scrub.data(exc.details)
            raise
        if not scrub:
            return response
        return scrubbed(response, scrub)

    def close(self) -> None:
        """Close the wrapped provider when it holds connections."""
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str) -> Any:
        # Anything else (a replay's `remaining`, a provider's counters) is the inner one's.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
