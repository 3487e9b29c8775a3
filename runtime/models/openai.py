"""OpenAI-compatible chat completions over httpx (OpenAI, vLLM, llama.cpp server, Ollama, LM Studio).

Retries 429, 5xx and connection failures with exponential backoff and full
jitter, honouring `Retry-After` (capped). Every httpx failure is mapped once, in
`_call`, to the model error taxonomy and chained with `from`. The API key comes
only from the environment and is never put in an error, a trace or a cassette.
"""

from __future__ import annotations

import json
import os
import random
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
from runtime.models.base import ChunkCallback, ModelConfig, ModelRequest, ModelResponse

MAX_RETRY_AFTER = 30.0


class _Retryable(Exception):
    def __init__(self, error: ModelError, retry_after: float | None = None) -> None:
        super().__init__(error.message)
        self.error, self.retry_after = error, retry_after


class OpenAIProvider:
    """Chat completions against one OpenAI-compatible endpoint."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        count_tokens: Callable[[str], int] | None = None,
        backoff_base: float = 0.5,
    ) -> None:
        self.config = config
        self.sleep = sleep
        self.rng = rng or random.Random(0)
        self.count_tokens = count_tokens
        self.backoff_base = backoff_base
        self.attempts = 0  # calls made to the server, for observability and tests
        self._client: Any = None

    def _http(self) -> Any:
        if self._client is None:
            import httpx

            timeout = httpx.Timeout(
                self.config.timeout_seconds, connect=self.config.connect_timeout_seconds
            )
            self._client = httpx.Client(timeout=timeout)
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.config.headers}
        key = os.environ.get(self.config.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _body(self, request: ModelRequest, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": request.messages,
            "max_tokens": request.max_output_tokens,
            "stream": stream,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """Send the request, retrying transient failures."""
        started = time.perf_counter()
        stream = on_chunk is not None
        last: ModelError | None = None
        for attempt in range(self.config.max_retries + 1):
            try:
                text, usage, finish = self._call(request, stream, on_chunk)
                break
            except _Retryable as exc:
                last = exc.error
                if attempt >= self.config.max_retries:
                    raise exc.error from exc
                delay = self.rng.uniform(0, self.backoff_base * 2**attempt)
                if exc.retry_after is not None:
                    delay = max(delay, min(exc.retry_after, MAX_RETRY_AFTER))
                self.sleep(delay)
        else:  # pragma: no cover - the loop always breaks or raises
            raise last or ModelProviderError("no attempt made")
        tokens_in = usage.get("prompt_tokens") if usage else None
        tokens_out = usage.get("completion_tokens") if usage else None
        if tokens_in is None or tokens_out is None:
            count = self.count_tokens or self._counter()
            tokens_in = sum(count(m.get("content", "")) for m in request.messages)
            tokens_out = count(text)
        return ModelResponse(
            text,
            int(tokens_in),
            int(tokens_out),
            round((time.perf_counter() - started) * 1000, 3),
            request.model or self.config.model,
            "openai",
            finish,
        )

    def _counter(self) -> Callable[[str], int]:
        from runtime.tokens import get_counter

        return get_counter(self.config.tokenizer).count

    def _call(
        self, request: ModelRequest, stream: bool, on_chunk: ChunkCallback | None
    ) -> tuple[str, dict[str, Any] | None, str]:
        """One HTTP exchange; every failure leaves here as a model error."""
        import httpx

        url = self.config.base_url.rstrip("/") + "/chat/completions"
        self.attempts += 1
        try:
            with self._http().stream(
                "POST", url, headers=self._headers(), json=self._body(request, stream)
            ) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    self._raise_for_status(resp)
                if stream:
                    return self._read_stream(resp, on_chunk)
                resp.read()
                return self._read_body(resp.text)
        except httpx.TimeoutException as exc:
            raise _Retryable(ModelTimeoutError(f"{url} timed out ({type(exc).__name__})")) from exc
        except httpx.TransportError as exc:
            raise _Retryable(
                ModelProviderError(f"cannot reach {url}: {type(exc).__name__}")
            ) from exc

    @staticmethod
    def _raise_for_status(resp: Any) -> None:
        status = resp.status_code
        detail = resp.text[:200].replace("\n", " ")
        if status in (401, 403):
            raise ModelAuthError(f"the model server refused the credentials ({status})")
        if status == 429:
            retry = resp.headers.get("Retry-After")
            try:
                after = float(retry) if retry is not None else None
            except ValueError:
                after = None
            raise _Retryable(ModelRateLimitedError(f"rate limited (429): {detail}"), after)
        if status >= 500:
            raise _Retryable(ModelProviderError(f"server error {status}: {detail}"))
        raise ModelProviderError(f"request rejected ({status}): {detail}")

    @staticmethod
    def _read_body(text: str) -> tuple[str, dict[str, Any] | None, str]:
        try:
            data = json.loads(text)
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelProviderError(f"malformed completion: {text[:120]!r}") from exc
        if not isinstance(content, str):
            raise ModelProviderError("completion content is not text")
        return content, data.get("usage"), str(choice.get("finish_reason") or "stop")

    @staticmethod
    def _read_stream(
        resp: Any, on_chunk: ChunkCallback | None
    ) -> tuple[str, dict[str, Any] | None, str]:
        parts: list[str] = []
        usage, finish = None, "stop"
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                event = json.loads(payload)
            except ValueError as exc:
                raise ModelProviderError(f"malformed stream event: {payload[:120]!r}") from exc
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                delta = (choice.get("delta") or {}).get("content")
                if delta:
                    parts.append(delta)
                    if on_chunk:
                        on_chunk(delta)
                finish = choice.get("finish_reason") or finish
        return "".join(parts), usage, finish
