"""Configured secrets: kept out of every reply, recorded request and error text, and out of URLs.

A secret is the value of an environment variable that holds an API key (`api_key_env`
of a model, `OPENAI_API_KEY` for ad-hoc specs and the embeddings endpoint). A server may
echo the key it was sent, in an error or inside a successful reply; `Scrubber` replaces
every occurrence with `[redacted]` before the text is stored, recorded or printed, also
when the key arrives split across streamed pieces.

Values shorter than `MIN_SECRET_LENGTH` are not scrubbed: placeholders such as vLLM's
`EMPTY` or `ollama` are not credentials, and replacing every such word in a reply would
corrupt it. Real API keys are far longer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def env_secrets(names: Iterable[str]) -> list[str]:
    """The current values of the named environment variables (unset and empty ones left out)."""
    return [value for name in dict.fromkeys(names) if (value := os.environ.get(name))]


class Scrubber:
    """Replaces every configured secret in text, JSON-like data and streamed pieces."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first: a key that contains another is replaced whole.
        unique = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
        self.secrets = tuple(sorted(unique, key=lambda s: (-len(s), s)))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """text with every secret replaced by `[redacted]`."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def data(self, value: Any) -> Any:
        """A copy of JSON-like data with every string (keys too) scrubbed."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def held_back(self, text: str) -> int:
        """Length of the longest end of text that could be the start of a secret."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def stream(self, sink: Callable[[str], None]) -> StreamScrubber:
        """A piece-by-piece scrubber in front of sink (flush it when the stream ends)."""
        return StreamScrubber(self, sink)


class StreamScrubber:
    """Passes streamed pieces on scrubbed, holding back any end that may begin a secret.

    A key split across pieces (`sk-te` + `st-123...`) is therefore never passed on in
    parts; what the sink receives, joined, equals the scrubbed whole reply.
    """

    def __init__(self, scrubber: Scrubber, sink: Callable[[str], None]) -> None:
        self._scrubber = scrubber
        self._sink = sink
        self._pending = ""

    def feed(self, piece: str) -> None:
        """Take one piece; pass on what can no longer turn into a secret."""
        text = self._scrubber.text(self._pending + piece)
        keep = self._scrubber.held_back(text)
        ready, self._pending = text[: len(text) - keep], text[len(text) - keep :]
        if ready:
            self._sink(ready)

    def flush(self) -> None:
        """The stream ended: pass on what was held back (it was not a whole secret)."""
        rest, self._pending = self._pending, ""
        if rest:
            self._sink(rest)


def url_credentials(url: str) -> str | None:
    """Why url may carry a credential (user-info, a query string, a fragment), else None.

    A base URL is a prefix paths are appended to, so a query string or fragment is never
    right in one, and `?api_key=...` would leak into errors and stores. The reason never
    quotes the URL.
    """
    if "?" in url:
        return "must not have a query string (?...): a credential in it would leak"
    if "#" in url:
        return "must not have a fragment (#...)"
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # not a URL at all: the caller's own check says so, without quoting it
    if parts.username is not None or parts.password is not None:
        return "must not hold credentials (user:password@)"
    return None
