"""call_model's redaction: what a model step reads from the run is masked before it is sent.

`masking(ctx)` resolves the step's `redact:` against `settings.redact` and the governed
exceptions (runtime/governance/exceptions.py: rule `redaction`), and returns a `Masking`:
a view of the step context whose reads (variables, conversation history, threads, the
variables a fidelity preamble shows) come back masked, a mask for the assembled messages
(the system prompt and preamble notes included) and a provider whose every request (each
tool round's rehydrated text too) is masked again before it leaves. Masking is idempotent:
a placeholder is never masked twice. The step's trace gets one `REDACTED` event: the kinds
masked and how many distinct values of each, never a value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from runtime.context.joined import whole
from runtime.contract.action import StepContext
from runtime.errors import RunError
from runtime.governance import exceptions, redaction

RULE = "redaction"


def redactor_for(ctx: StepContext, config: Mapping[str, Any] | None) -> redaction.Redactor | None:
    """The step's redactor, None when redaction is off or lifted by a governed exception."""
    if config is None:
        return None
    lifted = exceptions.active_exception(ctx.settings, RULE, ctx.step_id)
    if lifted is not None:
        # Each use is a trace event, and (EVENT_KINDS) a ledger entry of its own.
        ctx.trace("EXCEPTION_USED", **lifted.trace_data(), step=ctx.step_id)
        return None
    return redaction.build(config, redaction.run_key(ctx.run_id))


class Masking:
    """A redactor bound to one step run: masked reads, masked messages, a masking provider."""

    def __init__(self, ctx: StepContext, redactor: redaction.Redactor) -> None:
        self.ctx = ctx
        self.redactor = redactor
        self.seen: dict[str, set[str]] = {}
        self.traced: dict[str, int] | None = None

    def text(self, value: str) -> str:
        """One text masked; distinct placeholders are remembered for the trace."""
        before = dict(self.redactor.counts)
        try:
            out = self.redactor.redact(value)
        except redaction.PatternTimeoutError as exc:
            raise RunError(
                f"redaction pattern {exc.name!r} ran over its "
                f"{redaction.PATTERN_TIMEOUT_SECONDS} s bound: the prompt is not sent",
                code="REDACTION_PATTERN_TIMEOUT",
                step_id=self.ctx.step_id,
            ) from None
        if self.redactor.counts != before:
            for m in redaction.PLACEHOLDER.finditer(out):
                tag = m.group()
                self.seen.setdefault(tag[1:].rsplit("_", 1)[0].lower(), set()).add(tag)
        return out

    def value(self, value: Any) -> Any:
        """A JSON value with every string in it masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, Mapping):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Chat messages with every content masked (a tool call's arguments too)."""
        out = []
        for m in messages:
            m = dict(m)
            if m.get("content") is not None:  # a JoinedText (call_model's parts) too
                m["content"] = self.text(whole(m["content"]))
            if m.get("tool_calls"):
                m["tool_calls"] = self.value(m["tool_calls"])
            out.append(m)
        return out

    def final(
        self, messages: list[dict[str, Any]], tokens: int, provider: Any, ctx: StepContext
    ) -> tuple[list[dict[str, Any]], int]:
        """The messages to send masked, and their tokens (counted again if masking changed them)."""
        masked = self.messages(messages)
        if masked == messages:
            return messages, tokens
        from actions.call_model import MESSAGE_OVERHEAD

        count = ctx.services.tokens_for(provider.config).count
        return masked, sum(count(m.get("content") or "") + MESSAGE_OVERHEAD for m in masked)

    def trace(self, only_if_more: bool = False) -> None:
        """REDACTED: per kind, how many distinct values this step masked (no value).

        `only_if_more`: only when more were masked since the last event (tool rounds).
        """
        kinds = {kind: len(tags) for kind, tags in sorted(self.seen.items())}
        if only_if_more and kinds == self.traced:
            return
        self.traced = kinds
        self.ctx.trace("REDACTED", kinds=kinds, values=sum(kinds.values()))


class MaskedContext:
    """The step context with its reads masked; everything else is the context's own."""

    def __init__(self, ctx: StepContext, masking: Masking) -> None:
        self._ctx = ctx
        self._masking = masking
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def get(self, name: str, *default: Any) -> Any:
        """The variable, masked (once per step run: the budget stage reads it again)."""
        if name not in self._cache:
            self._cache[name] = self._masking.value(self._ctx.get(name, *default))
        return self._cache[name]

    def set(self, name: str, value: Any) -> None:
        """Written to the real context (a later read sees the new value, masked)."""
        self._cache.pop(name, None)
        self._ctx.set(name, value)

    def variables(self) -> Mapping[str, Any]:
        """The variables (what a fidelity preamble shows), masked."""
        return {k: self._masking.value(v) for k, v in self._ctx.variables().items()}

    def thread(self, thread_id: str) -> list[dict[str, Any]]:
        """A thread's messages, masked (threads written before redaction was on, too)."""
        return self._masking.messages(self._ctx.thread(thread_id))


class MaskingProvider:
    """The step's model provider; each request's messages are masked before it is sent."""

    def __init__(self, provider: Any, masking: Masking) -> None:
        self._provider = provider
        self._masking = masking

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    def complete(self, request: Any, **kwargs: Any) -> Any:
        """Complete the request with its messages masked."""
        masked = dataclasses.replace(request, messages=self._masking.messages(request.messages))
        return self._provider.complete(masked, **kwargs)


def masking(ctx: StepContext) -> Masking | None:
    """The step's masking, or None when it sends its prompt unmasked."""
    config = redaction.resolve(ctx.step.get("redact"), ctx.settings.get("redact"))
    redactor = redactor_for(ctx, config)
    return Masking(ctx, redactor) if redactor is not None else None
