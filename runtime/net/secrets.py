r"""Configured secrets: kept out of every reply, recorded request and error text, and out of URLs.

A secret is the value of an environment variable that holds an API key (`api_key_env`
of a model, `OPENAI_API_KEY` for ad-hoc specs and the embeddings endpoint). A server may
echo the key it was sent, in an error or inside a successful reply; `Scrubber` replaces
every occurrence with `[redacted]` before the text is stored, recorded or printed, also
when the key arrives split across streamed pieces.

An occurrence is the key in any form a reader turns back into it in one step:

- each character literal or escaped, forms mixed freely within one key: a JSON escape
  (`\u0073`, hex digits in any case; a surrogate pair for a character beyond U+FFFF;
  `\/`, `\"`, `\\` and the one-letter escapes), percent-encoded (`%73`, its UTF-8 bytes),
  or an HTML character reference (`&#115;`, `&#x73;`). An escape escaped again (JSON
  inside JSON, a Python repr of either: `\\u0073`) only gains backslashes, and any
  number of them is caught;
- the whole key in base64 (standard or URL-safe alphabet, at any of the three byte
  alignments, unwrapped) or in hexadecimal (its UTF-8 bytes, any case).

What is not caught, because no scrubber can list every transformation: any other
encoding (base32, rot13, a reversed key, base64 wrapped across lines or of a
transformed key), the key with other characters between its own, or a form of only part
of it. docs/guarantees.md says the same.

Values shorter than `MIN_SECRET_LENGTH` are not scrubbed: placeholders such as vLLM's
`EMPTY` or `ollama` are not credentials, and replacing every such word in a reply would
corrupt it. Real API keys are far longer.
"""

from __future__ import annotations

import base64
import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 8
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def env_secrets(names: Iterable[str]) -> list[str]:
    """The current values of the named environment variables (unset and empty ones left out)."""
    return [value for name in dict.fromkeys(names) if (value := os.environ.get(name))]


# One way to write one character: (text, case-insensitive). A form of a secret is a
# sequence of these choices, one per character.
_Choice = tuple[str, bool]
_Form = tuple[tuple[_Choice, ...], ...]
_SHORT_ESCAPES = {"/": "\\/", '"': '\\"', "\\": "\\\\"}
_SHORT_ESCAPES.update({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def _char_choices(c: str) -> tuple[_Choice, ...]:
    """Every way one character of a secret may be written: literal, JSON, %XX, HTML."""
    # A character beyond U+FFFF is a surrogate pair in JSON.
    units = c.encode("utf-16-be", "surrogatepass")
    json_escape = "".join(f"\\u{units[i : i + 2].hex()}" for i in range(0, len(units), 2))
    choices = [(c, False), (json_escape, True)]
    if c in _SHORT_ESCAPES:
        choices.append((_SHORT_ESCAPES[c], False))
    choices.append(("".join(f"%{b:02x}" for b in c.encode("utf-8", "surrogatepass")), True))
    if c == " ":
        choices.append(("+", False))  # form encoding
    choices += [(f"&#x{ord(c):x};", True), (f"&#{ord(c)};", False)]
    return tuple(choices)


def _whole_encodings(secret: str) -> list[str]:
    """Text every base64 (three alignments, two alphabets) or hex rendering of secret holds.

    A base64 text holding the secret at an offset of 0, 1 or 2 bytes into a 3-byte group
    has, between the characters its neighbours also touch, the same characters as the
    secret encoded after 0, 1 or 2 filler bytes.
    """
    raw = secret.encode("utf-8", "surrogatepass")
    out = []
    for skip in range(3):
        for alphabet in (None, b"-_"):
            text = base64.b64encode(b"\0" * skip + raw, alphabet).decode()
            core = text[(skip * 4 + 2) // 3 : (skip + len(raw)) // 3 * 4]
            if len(core) >= MIN_SECRET_LENGTH:
                out.append(core)
    return list(dict.fromkeys(out))


def _forms(secret: str) -> list[_Form]:
    """The forms of secret: character by character, then whole encodings."""
    forms: list[_Form] = [tuple(_char_choices(c) for c in secret)]
    forms += [tuple(((c, False),) for c in core) for core in _whole_encodings(secret)]
    forms.append(tuple(((c, True),) for c in secret.encode("utf-8", "surrogatepass").hex()))
    return forms


def _is_escape(written: str) -> bool:
    """An escape (`\\u0073`, `\\/`): escaped again (JSON in JSON, a repr) each of its
    backslashes doubles, so each stands for one or more."""
    return len(written) > 1 and written[0] == "\\" and written[1] != "\\"


def _choice_pattern(choice: _Choice) -> str:
    text, fold = choice
    if _is_escape(text):
        body = "".join("\\\\+" if c == "\\" else re.escape(c) for c in text)
    else:
        body = re.escape(text)
    return f"(?i:{body})" if fold else body


def _form_pattern(form: _Form) -> str:
    if all(len(choices) == 1 for choices in form):  # a whole encoding: one piece of text
        text = "".join(choices[0][0] for choices in form)
        return _choice_pattern((text, form[0][0][1]))
    return "".join("(?:" + "|".join(map(_choice_pattern, choices)) + ")" for choices in form)


@functools.lru_cache(maxsize=64)
def _compiled(secrets: tuple[str, ...]) -> tuple[re.Pattern[str], tuple[_Form, ...], int]:
    """(pattern matching every form of every secret, the forms, the longest form's length)."""
    forms = [form for secret in secrets for form in _forms(secret)]
    pattern = "|".join(map(_form_pattern, forms))
    longest = max((sum(max(len(t) for t, _ in c) for c in form) for form in forms), default=0)
    return re.compile(pattern), tuple(forms), longest


def _match(text: str, at: int, written: str, fold: bool) -> tuple[int, bool]:
    """(end, False) when written stands at text[at:], (-1, True) when text ends inside it,
    (-1, False) when it does not stand there."""
    escape = _is_escape(written)
    i = at
    for w in written:
        if i == len(text):
            return -1, True
        if escape and w == "\\":
            if text[i] != "\\":
                return -1, False
            while i < len(text) and text[i] == "\\":
                i += 1
            continue
        if text[i] != w and not (fold and text[i].lower() == w.lower()):
            return -1, False
        i += 1
    return i, False


def _ends_inside(text: str, pos: int, form: _Form, i: int) -> bool:
    """Whether text[pos:] is a proper beginning of form from its choice i on."""
    if pos == len(text):
        return True
    if i == len(form):
        return False  # the whole form matched and text goes on: not a beginning of it
    for written, fold in form[i]:
        end, inside = _match(text, pos, written, fold)
        if inside or (end >= 0 and _ends_inside(text, end, form, i + 1)):
            return True
    return False


class Scrubber:
    """Replaces every configured secret, in every form above, in text, data and streams."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first: a key that contains another is replaced whole.
        unique = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
        self.secrets = tuple(sorted(unique, key=lambda s: (-len(s), s)))
        self._pattern: re.Pattern[str] | None = None
        self._forms: Sequence[_Form] = ()
        self._longest = 0
        self._starts: frozenset[str] = frozenset()
        if self.secrets:
            self._pattern, self._forms, self._longest = _compiled(self.secrets)
            # Characters a form can begin with (folded), so most ends are ruled out at once.
            self._starts = frozenset(
                c for form in self._forms for text, _ in form[0] for c in (text[0], text[0].lower())
            )

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """text with every secret, in every form, replaced by `[redacted]`."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def found(self, text: str) -> bool:
        """Whether text holds a secret in any form."""
        return self._pattern is not None and self._pattern.search(text) is not None

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
        """Length of the longest end of text that could be the start of a secret (any form)."""
        for start in range(max(0, len(text) - self._longest), len(text)):
            if text[start] not in self._starts and text[start].lower() not in self._starts:
                continue
            if any(_ends_inside(text, start, form, 0) for form in self._forms):
                return len(text) - start
        return 0

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
