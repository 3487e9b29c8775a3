"""OpenAI-compatible chat completions over httpx (OpenAI, vLLM, llama.cpp server, Ollama).

Retries 429, 5xx, timeouts and connection failures with exponential backoff and
full jitter, waiting at least `Retry-After` (capped); 401/403 are never retried,
and a streamed reply is never retried once a piece of it was passed on (the
caller would see it twice). Every httpx failure and HTTP status is mapped to the
model error taxonomy in one place, `_exchange`, and chained with `from`.

Each request runs under `deadline_seconds` for the whole of it (connect, headers,
body and stream together, `runtime.net.deadline`): httpx's own timeouts are per
read, so a server dripping bytes would otherwise hold a step indefinitely.

The API key is read from the environment variable named by `api_key_env` for
each request and sent only as the `Authorization` header: it is never stored on
the provider, and any server text quoted in an error is scrubbed of it.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from runtime.errors import (
    ModelAuthError,
    ModelError,
    ModelProviderError,
    ModelRateLimitedError,
    ModelTimeoutError,
)
from runtime.models import wire
from runtime.models.base import ChunkCallback, ModelConfig, ModelRequest, ModelResponse
from runtime.net.deadline import Deadline, client_limits
from runtime.net.secrets import Scrubber

MAX_RETRY_AFTER = 30.0  # seconds: a longer Retry-After is waited this long, then retried
MAX_BACKOFF = 20.0


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds (a number or an HTTP date), or None when absent or unusable."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


class OpenAIProvider:
    """Chat completions against one OpenAI-compatible endpoint; thread-safe."""

    restorable_state = True  # every request carries its whole conversation

    def __init__(
        self,
        config: ModelConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        count_tokens: Callable[[str], int] | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = MAX_BACKOFF,
        retry_after_cap: float = MAX_RETRY_AFTER,
    ) -> None:
        self.config = config
        self.sleep = sleep
        # Unseeded by default: jitter exists to spread clients apart; tests inject a seeded one.
        self.rng = rng or random.Random()
        self.count_tokens = count_tokens
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.retry_after_cap = retry_after_cap
        self.attempts = 0  # HTTP requests sent, for observability and tests
        self._client: Any = None
        self._lock = threading.Lock()
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    def close(self) -> None:
        """Close the HTTP connection pool (a later request opens a new one)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """Send the request (streamed when request.stream or on_chunk), retrying transient failures."""
        started = time.perf_counter()
        # Streamed from the server whenever the configuration allows (the default), displayed
        # or not: a reply still being generated is bounded by the whole-call deadline, not cut
        # by the per-read timeout while the server thinks before its first byte.
        stream = request.stream or on_chunk is not None or self.config.stream
        delivered = False

        def relay(piece: str) -> None:
            nonlocal delivered
            if on_chunk is not None:
                delivered = True  # the reader saw it: this reply can no longer be retried
                on_chunk(piece)

        # Built once: a retry sends the same body (a long prompt is not folded and copied again).
        body = wire.request_body(
            request,
            request.model or self.config.model,
            stream,
            structured_output=self.config.structured_output,
            later_system=self.config.later_system,
        )
        attempt = 0
        retries: list[dict[str, Any]] = []
        while True:
            try:
                reply = self._exchange(body, stream, relay)
                break
            except ModelError as exc:
                retryable = exc.details.get("retryable", False) and not delivered
                if not retryable:
                    if retries:
                        exc.details["retries"] = retries
                    raise
                if attempt >= self.config.max_retries:
                    tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
                    raise type(exc)(
                        f"{exc.message} (gave up after {tries})", code=exc.code, retries=retries
                    ) from exc
                wait = self.delay(attempt, exc.details.get("retry_after"))
                retries.append(
                    {
                        "retry": attempt + 1,
                        "code": exc.code,
                        "reason": exc.message[:300],
                        "wait_s": round(wait, 3),
                    }
                )
                self.sleep(wait)
                attempt += 1
        tokens_in, tokens_out = reply.tokens_in, reply.tokens_out
        usage_from = "server"
        if tokens_in is None:
            count = self._counter()
            # An assistant message that only called a tool has content None.
            tokens_in = sum(count(m.get("content") or "") for m in request.messages)
            usage_from = "estimate"
        if tokens_out is None:
            tokens_out = self._counter()(reply.text)
            usage_from = "estimate"
        return ModelResponse(
            reply.text,
            tokens_in,
            tokens_out,
            round((time.perf_counter() - started) * 1000, 3),
            request.model or self.config.model,
            "openai",
            reply.finish_reason,
            reply.tool_calls,
            usage_from=usage_from,
            cached_tokens=reply.cached_tokens,
            retries=retries,
            response_format=body.get("response_format"),
        )

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number attempt + 1: full jitter, at least Retry-After."""
        wait = self.rng.uniform(0, min(self.backoff_cap, self.backoff_base * 2**attempt))
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_cap))
        return wait

    def _counter(self) -> Callable[[str], int]:
        # Only when the server gave no usage: loading a tokenizer is not free.
        if self.count_tokens is None:
            from runtime.context.tokens import counter_for

            # The model's own counter: a `server` or `hf:` tokenizer, else the tiktoken one.
            self.count_tokens = counter_for(self.config).count
        return self.count_tokens

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx

                timeout = httpx.Timeout(
                    self.config.timeout_seconds, connect=self.config.connect_timeout_seconds
                )
                self._client = httpx.Client(timeout=timeout, limits=client_limits())
            return self._client

    def _key(self) -> str:
        return os.environ.get(self.config.api_key_env, "")

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.config.headers}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _quote(self, text: str) -> str:
        """Server text quoted in an error: the key removed first (a server may echo it), then cut.

        Every configured secret is scrubbed again where replies and errors leave the model
        layer (`runtime.models.guard`); this covers the provider used on its own.
        """
        return repr(Scrubber([self._key()]).text(text)[:200])

    def _exchange(self, body: dict[str, Any], stream: bool, relay: ChunkCallback) -> wire.Reply:
        """One HTTP exchange; every failure leaves here as a model error (the one boundary)."""
        import httpx

        where = f"{self.config.name} ({self.url})"
        with self._lock:
            self.attempts += 1
        config = self.config
        deadline = Deadline(config.deadline_seconds)
        try:
            with (
                deadline,
                self._http().stream(
                    "POST",
                    self.url,
                    headers=self._headers(),
                    json=body,
                    timeout=deadline.timeout(
                        config.timeout_seconds, config.connect_timeout_seconds
                    ),
                    extensions=deadline.extensions(),
                ) as resp,
            ):
                if resp.status_code >= 400:
                    resp.read()
                    raise self._status_error(resp, where)
                kind = resp.headers.get("content-type", "")
                if stream and not kind.startswith("application/json"):
                    return wire.parse_stream(resp.iter_lines(), relay, self._quote)
                resp.read()
                reply = wire.parse_body(resp.text, self._quote)
                if stream and reply.text:
                    relay(reply.text)  # the server ignored `stream`: pass the whole reply on
                return reply
        except (ModelError, httpx.HTTPError) as exc:
            if deadline.expired:
                # The deadline cut the connection: whatever broke after that is its doing.
                raise ModelTimeoutError(
                    f"{where} did not finish within deadline_seconds={config.deadline_seconds:g} "
                    "(connect, headers and body together)",
                    retryable=True,
                ) from exc
            if isinstance(exc, ModelError):
                raise
            raise self._mapped(exc, where) from exc

    @staticmethod
    def _mapped(exc: Exception, where: str) -> ModelError:
        """The model error for an httpx failure."""
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return ModelTimeoutError(
                f"{where} did not answer in time ({type(exc).__name__})", retryable=True
            )
        if isinstance(exc, httpx.TransportError):
            return ModelProviderError(f"cannot reach {where}: {type(exc).__name__}", retryable=True)
        return ModelProviderError(f"{where} answered unreadable data: {type(exc).__name__}")

    def _status_error(self, resp: Any, where: str) -> ModelError:
        status = resp.status_code
        if status in (401, 403):
            # The body is not quoted: some servers echo part of the key they refused.
            return ModelAuthError(
                f"{where} refused the credentials ({status}); "
                f"the key is read from ${self.config.api_key_env}"
            )
        detail = self._quote(resp.text)
        if status == 429:
            after = retry_after_seconds(resp.headers.get("Retry-After"))
            return ModelRateLimitedError(
                f"{where} is rate limiting (429): {detail}", retryable=True, retry_after=after
            )
        if status >= 500:
            return ModelProviderError(f"{where} failed ({status}): {detail}", retryable=True)
        return ModelProviderError(f"{where} rejected the request ({status}): {detail}")
