"""Counting with a model's own tokenizer: a `tokenizer.json` (`hf:PATH`) or the server's.

tiktoken's encodings are not every model's: a llama.cpp server serving a small model
counted 1.00 to 1.30 times what cl100k_base counts for the same prompt. A model entry's
`tokenizer` may therefore name

- `hf:PATH`: a Hugging Face `tokenizer.json`, loaded through the `tokenizers` package
  (the `embeddings` and `dev` extras), encoded without special tokens;
- `server`: the model's OpenAI-compatible server, through the llama.cpp-style
  `POST {root}/tokenize` ({"content": ..., "add_special": false} -> {"tokens": [...]})
  and `POST {root}/detokenize` (for truncate), the root being `base_url` less `/v1`.
  Every request runs under the model's `deadline_seconds`; counts are remembered by
  content, so a text is sent once.

Neither has the property TokenCounter's incremental counting rests on (no BPE piece of
cl100k/o200k crosses a newline followed by a non-space: tokens.py `_SAFE_CUT`): these
counters report no cuts, so every count is of the whole text, exact, and their
`encoding_name` (`hf:<sha256 prefix of the file>`, `server:<root>`) is no tiktoken name,
so a count carried under one tokenizer is never reused under another.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runtime.errors import TokenizerError

SERVER = "server"
HF_PREFIX = "hf:"
INSTALL_TOKENIZERS = "pip install 'step-runtime[embeddings]' (it brings the tokenizers package)"
_IDS_CACHE = 256  # texts whose token ids are kept for truncate (counts are kept for more)
_CACHE_SIZE = 20_000  # texts whose counts are kept, as tokens.py keeps them
Parts = tuple[int, int, int]  # tokens.Parts: (first cut, last cut, tokens between them)


def server_root(base_url: str) -> str:
    """The server's root: base_url without a trailing slash and `/v1`."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class ForeignCounter:
    """TokenCounter's interface (runtime/context/tokens.py) over a tokenizer without safe
    cuts: every count is of the whole text, and no carried record is ever taken.

    Not a subclass: tokens.py loads these counters (get_counter), so this module imports
    nothing from it; tests/runtime/test_foreign_tokens.py holds the two interfaces equal.
    """

    encoding = None  # no tiktoken encoding behind it

    def __init__(self, name: str) -> None:
        self.encoding_name = name
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def ids(self, text: str) -> list[int]:
        """The token ids of text (no special tokens added)."""
        raise NotImplementedError

    def prefix(self, text: str, ids: list[int], keep: int) -> str:
        """The text of the first keep of text's ids, as a prefix of text."""
        raise NotImplementedError

    def count(self, text: str) -> int:
        """Exact token count of text."""
        return len(self.ids(text)) if text else 0

    def count_cached(self, text: str) -> int:
        """count(), remembered by content."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        n = self.count(text)
        self._keep(text, n)
        return n

    def _keep(self, text: str, n: int) -> None:
        with self._lock:
            self._cache[text] = n
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)

    def count_joined(self, blocks: Sequence[str], sep: str = "\n\n") -> int:
        """Exact count of sep.join(blocks): the whole text, counted once."""
        return self.count_cached(sep.join(blocks)) if blocks else 0

    def count_block(self, block: str, suffix: str = "") -> int:
        """Exact count of block + suffix."""
        return self.count_cached(block + suffix)

    def parts(self, text: str) -> Parts:
        """No cut: a foreign tokenizer's pieces may cross any point (see the module doc)."""
        return len(text), len(text), 0

    def seed_suffix(self, block: str, start: int, parts: Parts) -> Parts:
        """No cut (parts carried under another tokenizer never apply)."""
        return self.parts(block)

    def carried(self, text: str, record: Any) -> Parts | None:
        """None: the text is counted whole, whatever a record holds."""
        return None

    def carry(self, text: str) -> dict[str, Any]:
        """A record that carries nothing: no tokenizer reuses a count made by this one."""
        return {"encoding": self.encoding_name, "parts": {}}

    def carry_blocks(self, blocks: Iterable[str]) -> dict[str, Any]:
        """A record that carries nothing (see carry)."""
        return {"encoding": self.encoding_name, "blocks": {}}

    def take_blocks(self, blocks: Iterable[str], record: Any) -> int:
        """0: blocks are counted whole when needed, whatever a record holds."""
        return 0

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest token-boundary prefix of text with at most max_tokens tokens."""
        if max_tokens <= 0:
            return ""
        ids = self.ids(text)
        if len(ids) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            prefix = self.prefix(text, ids, keep)
            if self.count(prefix) <= max_tokens:  # re-encoding a cut can merge differently
                return prefix
            keep -= 1
        return ""


class HFTokenCounter(ForeignCounter):
    """Counts with a Hugging Face tokenizer.json (`hf:PATH`)."""

    def __init__(self, path: str | Path) -> None:
        where = f"tokenizer hf:{path}"
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizerError(
                f"{where}: the tokenizers package is not installed", hint=INSTALL_TOKENIZERS
            ) from exc
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise TokenizerError(
                f"{where}: cannot read the file ({exc.strerror or type(exc).__name__})",
                hint="name a tokenizer.json file (a relative path is read from the "
                "pipeline's folder)",
            ) from exc
        try:
            tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # the library raises plain Exception for a bad file
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise TokenizerError(
                f"{where} is not a tokenizer.json the tokenizers package can load: {first}",
                hint="use the tokenizer.json from the model's Hugging Face repository",
            ) from exc
        # A tokenizer.json may ask for truncation or padding (embedding models do): counting
        # needs every token of the text, and none added.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.path = str(path)
        super().__init__(HF_PREFIX + hashlib.sha256(data).hexdigest()[:16])

    def ids(self, text: str) -> list[int]:
        """The token ids of text (no special tokens added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest token-boundary prefix of text with at most max_tokens tokens."""
        if max_tokens <= 0:
            return ""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) <= max_tokens:
            return text
        offsets = encoding.offsets
        keep = max_tokens
        while keep > 0:
            prefix = text[: max(end for _, end in offsets[:keep])]
            if self.count(prefix) <= max_tokens:
                return prefix
            keep -= 1
        return ""


class ServerTokenCounter(ForeignCounter):
    """Counts with an OpenAI-compatible server's llama.cpp-style /tokenize (`server`)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.root = server_root(config.base_url)
        self.requests = 0  # HTTP requests sent, for tests and observability
        self._ids: OrderedDict[str, list[int]] = OrderedDict()
        self._client: Any = None
        super().__init__(f"{SERVER}:{self.root}")

    def count(self, text: str) -> int:
        """Exact token count of text, asked of the server once per distinct text."""
        return self.count_cached(text)

    def count_cached(self, text: str) -> int:
        """count(): every count is remembered by content."""
        if not text:
            return 0
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        return len(self.ids(text))

    def ids(self, text: str) -> list[int]:
        """The server's token ids of text (add_special false), remembered for recent texts."""
        if not text:
            return []
        with self._lock:
            hit = self._ids.get(text)
            if hit is not None:
                self._ids.move_to_end(text)
                return hit
        data = self._post("/tokenize", {"content": text, "add_special": False})
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(
            type(t) is int for t in tokens
        ):  # with_pieces was not asked for: plain ids only
            raise self._unreadable("/tokenize", "no list of token ids under `tokens`")
        with self._lock:
            self._ids[text] = tokens
            if len(self._ids) > _IDS_CACHE:
                self._ids.popitem(last=False)
        self._keep(text, len(tokens))
        return tokens

    def prefix(self, text: str, ids: list[int], keep: int) -> str:
        """The server's text of the first keep ids, cut to what text starts with."""
        data = self._post("/detokenize", {"tokens": ids[:keep]})
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, str):
            raise self._unreadable("/detokenize", "no text under `content`")
        # A detokenizer may add or drop a leading space (SentencePiece): keep what is common.
        n = 0
        for a, b in zip(text, content, strict=False):
            if a != b:
                break
            n += 1
        return text[:n]

    def _unreadable(self, path: str, what: str) -> TokenizerError:
        return TokenizerError(
            f"tokenizer server: {self.root}{path} answered {what}",
            hint="`tokenizer: server` needs a llama.cpp-style server; use tokenizer: hf:PATH "
            "with the model's tokenizer.json otherwise",
        )

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx

                from runtime.net.deadline import client_limits

                self._client = httpx.Client(limits=client_limits())
            return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.config.headers}
        key = os.environ.get(self.config.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """One request under the model's deadline; every failure is TOKENIZER_UNAVAILABLE."""
        import httpx

        from runtime.net.deadline import Deadline

        config, url = self.config, self.root + path
        with self._lock:
            self.requests += 1
        deadline = Deadline(config.deadline_seconds)
        try:
            with deadline:
                resp = self._http().post(
                    url,
                    json=body,
                    headers=self._headers(),
                    timeout=deadline.timeout(
                        config.timeout_seconds, config.connect_timeout_seconds
                    ),
                    extensions=deadline.extensions(),
                )
        except httpx.HTTPError as exc:
            why = (
                f"did not answer within deadline_seconds={config.deadline_seconds:g}"
                if deadline.expired
                else f"cannot be reached ({type(exc).__name__})"
            )
            raise TokenizerError(f"tokenizer server: {url} {why}") from exc
        # The body is never quoted: a server may echo the key it was sent.
        if resp.status_code in (404, 405, 501):
            raise TokenizerError(
                f"tokenizer server: {url} answered {resp.status_code}: the server has no "
                f"llama.cpp-style {path} endpoint",
                hint="use tokenizer: hf:PATH with the model's tokenizer.json, or a tiktoken "
                "encoding with token_margin (docs/models.md)",
            )
        if resp.status_code >= 400:
            raise TokenizerError(f"tokenizer server: {url} failed ({resp.status_code})")
        try:
            return resp.json()
        except ValueError as exc:
            raise self._unreadable(path, "no JSON") from exc


_counters: dict[tuple[Any, ...], ServerTokenCounter] = {}
_lock = threading.Lock()


def server_counter(config: Any) -> ServerTokenCounter:
    """The shared server counter of a model configuration (one per endpoint and access)."""
    if config.provider != "openai" or not config.base_url:
        raise TokenizerError(
            f"model {config.name}: tokenizer `server` counts with an OpenAI-compatible "
            f"server's /tokenize, and {config.provider} models have none",
            hint="set $RUNTIME_TOKENIZER (cl100k_base, o200k_base or hf:PATH) to count "
            "without the server",
        )
    key = (
        server_root(config.base_url),
        config.api_key_env,
        tuple(sorted(config.headers.items())),
        config.deadline_seconds,
        config.timeout_seconds,
        config.connect_timeout_seconds,
    )
    with _lock:
        counter = _counters.get(key)
        if counter is None:
            counter = _counters[key] = ServerTokenCounter(config)
        return counter
