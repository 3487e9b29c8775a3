"""The provider interface: requests, responses, per-model configuration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

# Conservative on purpose: a window larger than the server's lets some servers
# (Ollama) truncate the prompt silently; a smaller one fails loudly with CONTEXT_OVERFLOW.
DEFAULT_CONTEXT_WINDOW = 8192
EXTRACTIVE_CONTEXT_WINDOW = 128_000
REPLAY_CONTEXT_WINDOW = 1_000_000
# Seconds one model request may take in all; a longer reply is cut and is MODEL_TIMEOUT.
DEFAULT_DEADLINE = 120.0


@dataclass(frozen=True)
class ModelConfig:
    """A named model: provider, model name, endpoint, window, tokenizer, retry policy.

    Holds no secret: the API key is read from the environment variable named by
    `api_key_env` at request time.
    """

    name: str
    provider: str
    model: str = ""
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    context_window: int = DEFAULT_CONTEXT_WINDOW
    tokenizer: str = "cl100k_base"
    # A fraction of the count kept free when the tokenizer is not the model's own: the
    # prompt budget is the largest count with count * (1 + token_margin) <= window - reserve.
    token_margin: float = 0.0
    # Per-read silence allowed (seconds); None: only deadline_seconds bounds a read, so a
    # server still reading a long prompt before its first byte is not cut (issue 23).
    timeout_seconds: float | None = None
    connect_timeout_seconds: float = 10.0
    # The whole of one HTTP request (connect, headers, body and stream together): the per-read
    # timeouts above never end a server that drips a byte at a time.
    deadline_seconds: float = DEFAULT_DEADLINE
    max_retries: int = 3
    headers: dict[str, str] = field(default_factory=dict)
    cassette: str = ""
    # How a step's json_schema reaches the server (runtime/models/wire.py): `json_schema`
    # (OpenAI, llama.cpp, vLLM, Ollama), `json_object` for servers that refuse it, `none`.
    structured_output: str = "json_schema"
    # Ask for a streamed reply even when nothing is displayed: a reply still being generated
    # is then bounded by deadline_seconds, not by timeout_seconds of silence (issue 23).
    stream: bool = True
    # System messages after the first (a `full` thread joins several steps' conversations):
    # `user` folds each into the next user turn as a note, for chat templates that allow one
    # leading system message (llama.cpp's strict ones); `keep` sends them as they are.
    later_system: str = "user"


@dataclass(frozen=True)
class ToolCall:
    """One function call a model asked for: its id, the tool's name, the raw JSON arguments."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, str]:
        """The recorded form (cassettes)."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    def to_message(self) -> dict[str, Any]:
        """The OpenAI `tool_calls` entry of the assistant message that asked for it."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ModelRequest:
    """One chat completion request; `tools` are OpenAI function specs the model may call."""

    # Chat messages; an assistant message may carry `tool_calls`, a `tool` one `tool_call_id`.
    messages: list[dict[str, Any]]
    model: str = ""
    max_output_tokens: int = 512
    temperature: float | None = None
    top_p: float | None = None
    json_mode: bool = False
    json_schema: dict[str, Any] | None = None
    stream: bool = False
    step_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The recorded form: messages and parameters (requests never hold keys)."""
        out = {
            "messages": self.messages,
            "model": self.model,
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "json_mode": self.json_mode,
            "json_schema": self.json_schema,
        }
        if self.tools:
            out["tools"] = self.tools
        return out


@dataclass
class ModelResponse:
    """One completion."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    model: str = ""
    provider: str = ""
    finish_reason: str = "stop"
    tool_calls: list[ToolCall] = field(default_factory=list)  # empty: a plain answer
    # Where tokens_in/tokens_out come from: "server" (its usage), "estimate" (counted here
    # with the configured tokenizer: the server sent none), "tokenizer" (a local responder).
    usage_from: str = "tokenizer"
    cached_tokens: int | None = None  # prompt tokens the server reused from its cache
    # Provider-level retries before this reply: {retry, code, reason, wait_s} each.
    retries: list[dict[str, Any]] = field(default_factory=list)
    # The structured-output request the server got (`response_format`), if any.
    response_format: dict[str, Any] | None = None


ChunkCallback = Callable[[str], None]


class ModelProvider(Protocol):
    """Anything that answers chat requests; `config` gives the window and tokenizer."""

    config: ModelConfig
    # False when the provider keeps conversation state it cannot restore after a resume (a
    # server-side session): the first `full` step after a resume then starts fresh
    # (docs/fidelity.md). Every built-in provider sends whole messages, so it is True.
    restorable_state: bool

    def complete(
        self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None
    ) -> ModelResponse:
        """Answer one request (streaming text pieces to on_chunk when given)."""
        ...
