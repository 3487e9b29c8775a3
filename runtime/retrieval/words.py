"""Words of code and prose: identifiers split in every spelling, stopwords, index terms."""

from __future__ import annotations

import functools
import re

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")


_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "this",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "me",
        "show",
        "tell",
        "find",
        "explain",
        "about",
        "into",
        "there",
        "their",
        "they",
        "them",
        "get",
        "gets",
        "have",
        "has",
        "had",
        "was",
        "were",
        "been",
        "being",
    ]
)


def split_identifier(word: str) -> list[str]:
    """`BasketService` / `basket_service` -> ['basket', 'service']."""
    return list(_split(word))


@functools.lru_cache(maxsize=65536)
def _split(word: str) -> tuple[str, ...]:
    parts: list[str] = []
    for chunk in word.split("_"):
        parts += [p.lower() for p in _CAMEL.findall(chunk)]
    return tuple(p for p in parts if p)


_ASCII_WORD = re.compile(r"\w+", re.A)


# Every word split so far, and the split forms of those with several parts: set operations
# (in C) then leave only unseen words to Python. Bounded for long-lived processes.
_SEEN: set[str] = set()


_MULTI: dict[str, tuple[str, str]] = {}


def index_terms(text: str) -> str:
    """Extra searchable text: identifiers split into words and joined into one word."""
    words = set(_ASCII_WORD.findall(text))
    if len(_SEEN) > 200_000:
        _SEEN.clear()
        _MULTI.clear()
    for word in words - _SEEN:
        # Leading digits are a number, not part of the identifier (as WORD reads them).
        parts = _split(word.lstrip("0123456789"))
        if len(parts) > 1:
            _MULTI[word] = (" ".join(parts), "".join(parts))
        _SEEN.add(word)
    out = [term for word in words & _MULTI.keys() for term in _MULTI[word]]
    out.sort()
    return " ".join(out)
