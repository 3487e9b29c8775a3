"""The MODEL_CALL trace event, written the same way by every action that calls a model."""

from __future__ import annotations

import hashlib
from typing import Any

from runtime.contract.action import StepContext


def trace_model_call(
    ctx: StepContext,
    provider: Any,
    response: Any,
    prompt_tokens: int,
    messages: list[dict[str, Any]],
    **extra: Any,
) -> None:
    """Record one model call: model, provider, token counts, latency, messages."""
    ctx.trace(
        "MODEL_CALL",
        model=response.model or provider.config.model,
        provider=response.provider,
        tokens_in=response.tokens_in,
        tokens_out=response.tokens_out,
        prompt_tokens=prompt_tokens,
        latency_ms=response.latency_ms,
        finish_reason=response.finish_reason,
        # "server": the server's own counts; "estimate": counted here, the server sent none.
        usage_from=getattr(response, "usage_from", "tokenizer"),
        **{
            key: getattr(response, key)
            # The server's prompt-cache reuse, and the structured output it was asked for.
            for key in ("cached_tokens", "response_format")
            if getattr(response, key, None) is not None
        },
        messages=messages,
        # The reply's opening, for the notes of later preambles (runtime/context/fidelity.py).
        reply=(response.text or "")[:400],
        # The whole reply's hash, for the provenance ledger (runtime/governance/ledger.py).
        reply_sha256=hashlib.sha256(
            (response.text or "").encode("utf-8", "surrogatepass")
        ).hexdigest(),
        **extra,
    )
