"""Redaction: personal data and secrets masked before text reaches a model (docs/access.md).

Pure: no engine, no action. `Redactor(config, key).redact(text)` returns the masked text
and the count of each kind masked. A value's placeholder is `[KIND_xxxxxxxx]`, eight hex
digits of an HMAC of the value under the run's key (`run_key`): the same value gets the same
placeholder in every step of a run and after a resume, and nothing needs storing to keep it
so. The values themselves are never returned, traced or stored by this module.

Kinds (closed set, `KINDS`): `email`, `phone`, `card` (Luhn-checked, known card prefixes),
`iban` (country length and the mod-97 checksum), `secret` (provider API keys and tokens,
JWTs, private key blocks, bearer tokens, high-entropy quoted strings), `password`
(passwords and keys assigned in config files, and in connection strings), plus custom
patterns from YAML (`patterns: [{name, regex}]`, matched with a time bound).
"""

from __future__ import annotations

import bisect
import hmac
import itertools
import math
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("email", "phone", "card", "iban", "secret", "password")
KEY_ENV = "RUNTIME_REDACTION_KEY"
# Custom patterns run in the `regex` module with this bound per text (catastrophic
# backtracking ends as REDACTION_PATTERN_TIMEOUT, never a hang) and are probed at validation.
PATTERN_TIMEOUT_SECONDS = 0.5
PATTERN_MAX_CHARS = 500
PATTERNS_MAX = 50
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
_PRIORITY = {"secret": 0, "password": 1, "card": 2, "iban": 3, "email": 6, "phone": 7}
PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]{0,31}_[0-9a-f]{8}\]")

# --- the detectors ---------------------------------------------------------------------
_EMAIL = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w-])"
)
# International (+CC ...) or North American ((555) 123-4567, 555-123-4567) forms only:
# bare digit runs are ids, counts and timestamps far more often than phone numbers.
_PHONES = tuple(
    re.compile(p + r"(?![\w.-]?\d)")
    for p in (
        r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}",
        r"\(\d{3}\)[ ]?\d{3}[ .-]\d{4}",
        r"[0-9]{3}[.-][0-9]{3}[.-][0-9]{4}",
    )
)
# 13-19 digits, optionally grouped by one kind of separator (a line break counts: a number
# wrapped in a log or a table is still a card number).
_CARD = re.compile(r"[0-9](?:[\s-]?[0-9]){11,18}")  # one way to match: no backtracking blow-up
_IBAN = re.compile(r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{1,4}){3,8}")

# Provider keys and tokens: the detect-secrets plugins' patterns (AWS, GitHub, GitLab, Slack,
# Stripe, Twilio, SendGrid, npm, PyPI, JWT, private keys, basic auth) and a few more.
_TOKENS = [
    r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}",
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}",
    r"github_pat_[A-Za-z0-9_]{22,255}",
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
    r"sk_(?:live|test)_[0-9a-zA-Z]{16,}",
    r"rk_(?:live|test)_[0-9a-zA-Z]{16,}",
    r"sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    r"AIza[0-9A-Za-z_-]{35}",
    r"SK[0-9a-fA-F]{32}",
    r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}",
    r"npm_[A-Za-z0-9]{36}",
    r"pypi-AgE[A-Za-z0-9_-]{50,}",
    r"hf_[A-Za-z]{34}",
    r"sq0(?:atp|csp)-[0-9A-Za-z_-]{22,43}",
    r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
    r"AccountKey=[A-Za-z0-9+/]{40,}={0,2}",
    r"dop_v1_[a-f0-9]{64}",
    r"shpat_[a-fA-F0-9]{32}",
]
# One pattern each: each starts with a literal, which the regex engine scans for fast (one
# alternation of them all is slower than all of them apart).
_TOKEN = tuple(re.compile(t) for t in _TOKENS)
_PEM = re.compile(
    r"-----BEGIN[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\r\n]+[ \t]*[A-Za-z0-9+/=:, -]{1,100})*"
    r"(?:[\r\n]+-----END[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
)
# The tail of a key block whose head is in another text (an evidence item cut inside it):
# the base64 lines just above an END line, found walking back from it (a regex over the
# lines would try every line start again: quadratic on a long block with no END).
_PEM_END = re.compile(r"-----END[A-Z ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]{16,100}[ \t]*")
PEM_TAIL_LINES = 400
_BEARER = re.compile(  # run on the lower-cased text; the value is read from the text
    r"authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+([a-z0-9._~+/=-]{12,})"
)
_QUOTED = re.compile(r"([\"'])([A-Za-z0-9+/=_-]{32,512})\1")

# Credentials in URLs (scheme://user:password@host) and key=value connection strings.
_URL_CREDENTIAL = re.compile(r"://[^\s:/@\"'<>]{1,128}:([^\s@\"'<>/]{1,256})@")
_CONN_PART = re.compile(
    # run on the lower-cased text; the value is read from the text
    r"(?:password|pwd|sharedaccesskey|client_secret)\s*=\s*"
    r"(\"[^\"\r\n]{1,256}\"|'[^'\r\n]{1,256}'|[^;\s\"'()\[\]{}]{1,256})(?=;|\s|$|\"|')"
)
# Keys named like a password or a secret, assigned a value (`password: x`, `DB_PASS=x`,
# `"api_key": "x"`, `secret => 'x'`).
# What follows a key named like a password or a secret (found by _KEYWORD): an assignment
# and its value (`password: x`, `DB_PASS=x`, `"api_key": "x"`, `secret => 'x'`).
_POSITIONAL = re.compile(  # auth=("user", "pw"), NetworkCredential("user", "pw"), mysql -ppw
    r"(?:\bauth\s*=\s*\(|\bHTTPBasicAuth\(|\bNetworkCredential\(|\bBasicAuth\()\s*"
    r"([\"'])[^\"'\r\n]{1,128}\1\s*,\s*([\"'])(?P<quoted>[^\"'\r\n]{3,256})\2"
    r"|\bmysql(?:dump)?\b[^\r\n]{0,80}?\s-p(?P<bare>[^\s\"']{3,256})"
)
_XML_VALUE = re.compile(  # <add key="SmtpPassword" value="x" />
    r"[\"']\s+value\s*=\s*(?P<q>[\"'])(?P<quoted>[^\"'\r\n]{3,256})(?P=q)"
)
_ASSIGN = re.compile(
    r"[\"']?(?P<op>[ \t]*(?:=>|:=|[:=])[ \t]*|[\"'][ \t]*,[ \t]*(?=[\"']))"
    r"(?:(?P<q>[\"'])(?P<quoted>[^\"'\r\n]{3,256})(?P=q)|(?P<bare>[^\s\"',;)(\[\]{}]{3,256}))"
)
_KEYWORD = re.compile(  # run on the lower-cased text
    r"pass(?:word|wd|phrase)?|pwd|secret|api[_-]?key|apikey|access[_-]?key|token|"
    r"private[_-]?key|credential"
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_NOT_A_VALUE = frozenset(
    [
        "none",
        "null",
        "nil",
        "true",
        "false",
        "str",
        "string",
        "int",
        "bytes",
        "bool",
        "optional",
        "any",
        "dict",
        "list",
        "object",
        "undefined",
        "required",
        "yes",
        "no",
        "env",
        "secret",
        "password",
        "token",
        "key",
        "value",
        "self",
        "this",
        "pass",
    ]
)
_REFERENCE = re.compile(r"^(?:\$\{?|\{\{|%\(|<|\*{3,}|x{4,}$|\.{3}|!|@|\$\()", re.I)
_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")  # an environment variable's name
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::|->)[A-Za-z_][A-Za-z0-9_]*)*$")

# IBAN lengths by country (SWIFT registry).
_IBAN_LENGTH = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FO", "GL", "NL"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "XK"], 20),
    **dict.fromkeys(["CH", "CR", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "IQ", "TL"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["PT", "ST"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["FR", "GR", "IT", "MC", "MR", "SM"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "PL", "SV"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["JO", "KW", "MU"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
}


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a string of digits holds."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_prefix_ok(digits: str) -> bool:
    """A card number's issuer prefix and length (Visa, Mastercard, Amex, Discover, JCB, ...)."""
    n = len(digits)
    two, four = int(digits[:2]), int(digits[:4])
    if digits[0] == "4":
        return n in (13, 16, 19)
    if 51 <= two <= 55 or 2221 <= four <= 2720:
        return n == 16
    if two in (34, 37):
        return n == 15
    if digits.startswith("6011") or two == 65 or 644 <= int(digits[:3]) <= 649:
        return 16 <= n <= 19
    if 3528 <= four <= 3589:
        return 16 <= n <= 19
    if two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19
    return two in (50, 56, 57, 58, 62, 63, 67) and 12 <= n <= 19  # Maestro, UnionPay


def iban_ok(text: str) -> bool:
    """A compact IBAN has its country's length and the ISO 13616 mod-97 checksum."""
    if _IBAN_LENGTH.get(text[:2]) != len(text):
        return False
    moved = text[4:] + text[:4]
    number = "".join(str(int(ch, 36)) for ch in moved)
    return int(number) % 97 == 1


def entropy(text: str) -> float:
    """Shannon entropy of the characters, in bits per character."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def run_key(run_id: str, secret: str | None = None) -> bytes:
    """The run's placeholder key: HMAC of the run id under $RUNTIME_REDACTION_KEY if set.

    Without the variable, placeholders are keyed by the run id alone: stable in the run,
    different across runs, but anyone who has both can test a guessed value against one.
    """
    base = (secret if secret is not None else os.environ.get(KEY_ENV, "")).encode("utf-8")
    return hmac.new(base or b"step-runtime redaction", run_id.encode("utf-8"), "sha256").digest()


@dataclass(frozen=True)
class Custom:
    """A custom pattern from YAML: its placeholder name and the compiled `regex` pattern."""

    name: str
    pattern: Any  # regex.Pattern


class PatternTimeoutError(Exception):
    """A custom pattern took longer than its bound on a text (caught as a coded error)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


@dataclass
class Redactor:
    """Masks the configured kinds in text; `counts` adds up what it masked."""

    kinds: frozenset[str]
    key: bytes
    custom: tuple[Custom, ...] = ()
    counts: Counter[str] = field(default_factory=Counter)

    def placeholder(self, kind: str, value: str) -> str:
        """`[KIND_xxxxxxxx]`: the same value, the same placeholder under the same key."""
        digest = hmac.new(self.key, f"{kind}\0{value}".encode("utf-8", "surrogatepass"), "sha256")
        return f"[{kind.upper()}_{digest.hexdigest()[:8]}]"

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every value to mask, in order, none overlapping.

        Where two overlap, the stronger kind wins (`PRIORITY`: a password in a URL is not an
        e-mail address), then the longer span, then the earlier.
        """
        found = sorted(self._find(text), key=lambda s: (_PRIORITY.get(s[2], 5), s[0] - s[1], s[0]))
        # Placeholders already in the text are kept as they are: masking twice changes
        # nothing (a custom pattern never masks part of one).
        taken = (
            [(m.start(), m.end(), "") for m in PLACEHOLDER.finditer(text)] if "[" in text else []
        )
        starts = [s[0] for s in taken]
        for span in found:
            i = bisect.bisect_right(starts, span[0])
            if i and taken[i - 1][1] > span[0]:
                continue
            if i < len(taken) and taken[i][0] < span[1]:
                continue
            taken.insert(i, span)
            starts.insert(i, span[0])
        return [s for s in taken if s[2]]

    def redact(self, text: str) -> str:
        """The text with every configured kind replaced by its placeholder."""
        spans = self.spans(text)
        if not spans:
            return text
        pieces = []
        at = 0
        for start, stop, kind in spans:
            pieces.append(text[at:start])
            pieces.append(self.placeholder(kind, text[start:stop]))
            self.counts[kind] += 1
            at = stop
        pieces.append(text[at:])
        return "".join(pieces)

    def redact_value(self, value: Any) -> Any:
        """A JSON value with every string in it redacted (mapping keys included)."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        if isinstance(value, Mapping):
            return {self.redact(str(k)): self.redact_value(v) for k, v in value.items()}
        return value

    def _find(self, text: str) -> Iterator[tuple[int, int, str]]:
        kinds = self.kinds
        if "secret" in kinds:
            yield from _secrets(text)
        if "password" in kinds:
            yield from _passwords(text)
        if "email" in kinds and "@" in text:
            yield from _emails(text)
        if "card" in kinds:
            for m in _CARD.finditer(text):
                yield from _cards(text, m.start(), m.end())
        if "iban" in kinds:
            for m in _IBAN.finditer(text):
                if _alone(text, m.start(), m.end(), _ALNUM, _ALNUM) and iban_ok(
                    m.group().replace(" ", "")
                ):
                    yield m.start(), m.end(), "iban"
        if "phone" in kinds:
            for rx in _PHONES:
                for m in rx.finditer(text):
                    if _alone(text, m.start(), m.end(), _WORD + "+", "") and (
                        7 <= sum(ch.isdigit() for ch in m.group()) <= 15
                    ):
                        yield m.start(), m.end(), "phone"
        for custom in self.custom:
            try:
                for m in custom.pattern.finditer(text, timeout=PATTERN_TIMEOUT_SECONDS):
                    if m.end() > m.start():
                        yield m.start(), m.end(), custom.name
            except TimeoutError as exc:
                raise PatternTimeoutError(custom.name) from exc


def _cards(text: str, start: int, end: int) -> Iterator[tuple[int, int, str]]:
    """A card candidate, else the longest run of its digit groups that is a card.

    A number beside a card's groups (`4111 1111 1111 1111 12/29`, a line break then digits)
    makes the candidate fail as a whole; the card inside it is still one.
    """
    if _alone(text, start, end, _WORD + ".-", _WORD) and _card_digits_ok(text[start:end]):
        yield start, end, "card"
        return
    groups = [(m.start() + start, m.end() + start) for m in _DIGITS.finditer(text[start:end])]
    if len(groups) < 2:
        return
    best: tuple[int, int] | None = None
    for i in range(len(groups)):
        for j in range(len(groups) - 1, i - 1, -1):
            a, b = groups[i][0], groups[j][1]
            if (
                (best is None or b - a > best[1] - best[0])
                and _alone(text, a, b, _WORD + ".-", _WORD)
                and _card_digits_ok(text[a:b])
            ):
                best = (a, b)
                break
    if best is not None:
        yield best[0], best[1], "card"


_DIGITS = re.compile(r"[0-9]+")


def _card_digits_ok(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    return 13 <= len(digits) <= 19 and _card_prefix_ok(digits) and luhn_ok(digits)


_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_WORD = _ALNUM + "_"


def _alone(text: str, start: int, end: int, before: str, after: str) -> bool:
    """No character of `before` just before the match, none of `after` just after it.

    The detectors' boundaries are checked here rather than as look-behinds: a pattern that
    starts with a look-behind loses the regex engine's fast scan for its first character.
    """
    if start and text[start - 1] in before:
        return False
    return not (end < len(text) and text[end] in after)


def _emails(text: str) -> Iterator[tuple[int, int, str]]:
    at = text.find("@")
    done = 0
    while at >= 0:
        start = at
        floor = max(done, at - 64)
        while start > floor and text[start - 1] in _LOCAL_CHARS:
            start -= 1
        while start < at and text[start] in "._%+-":
            start += 1
        m = _EMAIL.match(text, start) if start < at else None
        if m is not None and _alone(text, m.start(), m.end(), "", _WORD + "-"):
            yield m.start(), m.end(), "email"
            done = m.end()
        at = text.find("@", max(at + 1, done))


_LOCAL_CHARS = frozenset(_WORD + ".%+-")


def _secrets(text: str) -> Iterator[tuple[int, int, str]]:
    for rx in _TOKEN:
        for m in rx.finditer(text):
            if _alone(text, m.start(), m.end(), _WORD, _WORD):
                yield m.start(), m.end(), "secret"
    if "PRIVATE KEY" in text:
        for m in _PEM.finditer(text):
            yield m.start(), m.end(), "secret"
        for m in _PEM_END.finditer(text):
            start = m.start()
            for _ in range(PEM_TAIL_LINES):
                above = text.rfind("\n", 0, max(0, start - 1))
                line = text[above + 1 : start].rstrip("\r\n")
                if not _PEM_LINE.fullmatch(line):
                    break
                start = above + 1
            if start < m.start():
                yield start, m.end(), "secret"
    low = _lower(text)
    if "authorization" in low:
        for m in _BEARER.finditer(low):
            if not PLACEHOLDER.fullmatch(text[m.start(1) : m.end(1)]):
                yield m.start(1), m.end(1), "secret"
    for m in _QUOTED.finditer(text):
        value = m.group(2)
        if _high_entropy(value):
            yield m.start(2), m.end(2), "secret"


def _lower(text: str) -> str:
    """The text lower-cased, or the text itself where lower-casing changes its length."""
    low = text.lower()
    return low if len(low) == len(text) else text


def _high_entropy(value: str) -> bool:
    """A random-looking token: mixed case and digits, entropy near base64's (not a hash)."""
    has = (
        any(c.isdigit() for c in value),
        any(c.isupper() for c in value),
        any(c.islower() for c in value),
    )
    if not all(has):
        return False
    # An alphabet or a run (`0123...ABC...`) is ordered, not random.
    steps = sum(ord(b) - ord(a) == 1 for a, b in itertools.pairwise(value))
    return steps < len(value) // 4 and entropy(value) >= 4.3


def _passwords(text: str) -> Iterator[tuple[int, int, str]]:
    if "://" in text:
        at = text.find("://")
        while at >= 0:
            m = _URL_CREDENTIAL.match(text, at)
            if m and not PLACEHOLDER.fullmatch(m.group(1)) and not m.group(1).startswith("$"):
                yield m.start(1), m.end(1), "password"
            at = text.find("://", at + 3)
    low = _lower(text)
    if ("password" in low or "pwd" in low or "secret" in low) and "=" in text:
        for m in _CONN_PART.finditer(low):
            if not _alone(text, m.start(), m.end(), _WORD, ""):
                continue
            # Only inside a `k=v;k=v` string: a `;` just before the key or after the value.
            before = text[max(0, m.start() - 40) : m.start()].rstrip()[-1:]
            if before != ";" and text[m.end() : m.end() + 1] != ";":
                continue
            value = text[m.start(1) : m.end(1)].strip("\"'")
            if _is_value(value, quoted=True):
                yield m.start(1), m.end(1), "password"
    if "auth" in low or "credential" in low or "mysql" in low:
        for m in _POSITIONAL.finditer(text):
            group = "quoted" if m.group("quoted") is not None else "bare"
            if _is_value(m.group(group), quoted=group == "quoted"):
                yield m.start(group), m.end(group), "password"
    end = 0
    for hit in _KEYWORD.finditer(low):
        if hit.start() < end:
            continue
        # The key's start and end: over the name's characters either side of the keyword
        # (one regex for key and value, tried at every position, was several times slower).
        start, stop = hit.start(), hit.end()
        floor, ceiling = max(0, start - 40), min(len(text), stop + 20)
        while start > floor and text[start - 1] in _NAME_CHARS:
            start -= 1
        while stop < ceiling and text[stop] in _NAME_CHARS:
            stop += 1
        after = text[hit.end() : hit.end() + 1]
        if after.isalpha() and (after.islower() or text[hit.end() - 1].isupper()):
            end = stop  # `tokenizer`, `TOKENIZER`, `secretary`: another word (not `secretKey`)
            continue
        if (
            hit.end() - hit.start() == 4
            and hit.group() == "pass"
            and (stop != hit.end() or (hit.start() > start and text[hit.start() - 1] not in "_.-"))
        ):
            end = stop  # `pass` alone only ends a name: `smtp_pass`, not `compass`, `passes`
            continue
        m = _ASSIGN.match(text, stop) or _XML_VALUE.match(text, stop)
        # `f("DB_PASSWORD", "x")`: a quoted name as a call's first argument, not any two
        # strings in a list.
        if (
            m is not None
            and "," in (m.groupdict().get("op") or "")
            and not text[max(0, start - 8) : max(0, start - 1)].rstrip().endswith("(")
        ):
            m = None
        if m is None:
            end = stop
            continue
        end = m.end()
        quoted = m.group("quoted")
        if quoted is not None:
            if _is_value(quoted, quoted=True):
                yield m.start("quoted"), m.end("quoted"), "password"
            continue
        bare = m.group("bare")
        if bare is not None and _bare_is_value(text, m, bare, start):
            yield m.start("bare"), m.end("bare"), "password"


def _is_value(value: str, *, quoted: bool) -> bool:
    """Not empty, not a reference (`${X}`, `{{x}}`, `<x>`), not a type or a keyword."""
    v = value.strip()
    if len(v) < 3 or PLACEHOLDER.fullmatch(v) or _REFERENCE.match(v):
        return False
    if v.lower() in _NOT_A_VALUE or _CONSTANT.fullmatch(v):
        return False
    return quoted or not v.isdigit()


def _bare_is_value(text: str, m: re.Match[str], bare: str, key_start: int) -> bool:
    """An unquoted value: config (`KEY=value`, `key: value`), never a code expression."""
    if not _is_value(bare, quoted=False):
        return False
    op = m.group("op")
    line_start = text.rfind("\n", 0, key_start) + 1
    before = text[line_start:key_start]
    stop = text.find("\n", m.end())
    rest = text[m.end() : stop if stop >= 0 else len(text)]
    if rest.strip() and rest.lstrip()[:1] in "(.[":  # a call or an attribute: code
        return False
    at_line_start = not before.strip() or before.strip() in ("export", "-", "set")
    if ":" in op and "=" not in op:
        # YAML / properties `key: value`: a config line; a bare name there is an annotation.
        return at_line_start and not (_IDENT.match(bare) and not any(c.isdigit() for c in bare))
    looks_random = len(bare) >= 16 and _mixed(bare)
    if op == "=":
        if rest.strip() and rest.lstrip()[:1] in ",)":
            return False  # a keyword argument: `f(token=value)`
        if before.strip() in ("", "export", "set") and before[:1] not in (" ", "\t"):
            # `KEY=value` from the first column: .env, ini, shell.
            return not bare.startswith("$")
        return not _IDENT.match(bare) or looks_random
    # `key = value` with spaces: ini and TOML write that, and so does code (`x = y`).
    return at_line_start and (not _IDENT.match(bare) or looks_random)


def _mixed(value: str) -> bool:
    """Digits, upper- and lower-case letters all in it: a generated value, not a name."""
    return (
        any(c.isdigit() for c in value)
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
    )


# --- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigProblem:
    """A problem in a `redact:` value: code, message, path inside the value."""

    code: str
    message: str
    path: tuple[str | int, ...] = ()


def config_problems(value: Any) -> Iterator[ConfigProblem]:
    """What is wrong in a `redact:` value (true, false or {kinds, patterns}), with paths."""
    if isinstance(value, bool) or not isinstance(value, Mapping):
        return
    kinds = value.get("kinds")
    if isinstance(kinds, list):
        for i, kind in enumerate(kinds):
            if kind not in KINDS:
                yield ConfigProblem(
                    "REDACTION_INVALID",
                    f"unknown redaction kind {kind!r} (one of: {', '.join(KINDS)})",
                    ("kinds", i),
                )
    patterns = value.get("patterns")
    if not isinstance(patterns, list):
        return
    if len(patterns) > PATTERNS_MAX:
        yield ConfigProblem(
            "REDACTION_INVALID", f"{len(patterns)} patterns: at most {PATTERNS_MAX}", ("patterns",)
        )
    seen: set[str] = set()
    for i, item in enumerate(patterns):
        if not isinstance(item, Mapping):
            continue
        name, regex_text = item.get("name"), item.get("regex")
        if isinstance(name, str):
            if not _NAME.match(name) or name in KINDS:
                yield ConfigProblem(
                    "REDACTION_INVALID",
                    f"pattern name {name!r}: lower-case letters, digits and _ (at most 31), "
                    "not a built-in kind",
                    ("patterns", i, "name"),
                )
            elif name in seen:
                yield ConfigProblem(
                    "REDACTION_INVALID", f"pattern name {name!r} twice", ("patterns", i, "name")
                )
            seen.add(name)
        if isinstance(regex_text, str):
            problem = pattern_problem(regex_text)
            if problem:
                yield ConfigProblem("REDACTION_PATTERN_INVALID", problem, ("patterns", i, "regex"))


# Inputs that make a backtracking pattern explode; a sane one answers them in microseconds.
_PROBES = tuple(
    c * 40 + tail for c in ("a", "1", " ", "aA1", "@.") for tail in ("!", "\n", "\0", "")
)


def pattern_problem(text: str) -> str | None:
    """Why a custom pattern is refused (syntax, size, empty matches, backtracking), or None."""
    import regex

    if len(text) > PATTERN_MAX_CHARS:
        return f"the pattern is {len(text)} characters: at most {PATTERN_MAX_CHARS}"
    try:
        compiled = regex.compile(text)
    except regex.error as exc:
        return f"not a valid regular expression: {exc}"
    if compiled.search("", timeout=PATTERN_TIMEOUT_SECONDS) is not None:
        return "the pattern matches the empty string: it would mask nothing or everything"
    try:
        for probe in _PROBES:
            compiled.search(probe * 3, timeout=PATTERN_TIMEOUT_SECONDS)
    except TimeoutError:
        return (
            "the pattern backtracks catastrophically (it ran over "
            f"{PATTERN_TIMEOUT_SECONDS} s on a 360-character probe): "
            "avoid nested quantifiers such as (a+)+"
        )
    return None


def resolve(step_value: Any, settings_value: Any) -> dict[str, Any] | None:
    """The redaction a model step applies: None (off) or {kinds, patterns}.

    The step's `redact:` wins over the settings' (`false` turns it off for the step; `true`
    takes the settings' configuration, else every kind); a step mapping's `kinds` replace
    the settings' and its `patterns` are added to them.
    """
    base = settings_value if isinstance(settings_value, Mapping) else {}
    if step_value is None:
        if settings_value is None or settings_value is False:
            return None
        step_value = True
    if step_value is False:
        return None
    own = step_value if isinstance(step_value, Mapping) else {}
    kinds = own.get("kinds", base.get("kinds", list(KINDS)))
    patterns = [*(base.get("patterns") or ()), *(own.get("patterns") or ())]
    return {"kinds": list(kinds), "patterns": patterns}


def build(config: Mapping[str, Any], key: bytes) -> Redactor:
    """A redactor for a resolved configuration (valid: validation refused the rest)."""
    import regex

    custom = tuple(
        Custom(p["name"], regex.compile(p["regex"])) for p in config.get("patterns") or ()
    )
    return Redactor(frozenset(config.get("kinds") or ()), key, custom)


SCHEMA: dict[str, Any] = {
    "description": "Mask personal data and secrets before text reaches a model "
    "(docs/access.md, Redaction): true (every kind), false, or {kinds, patterns}.",
    "anyOf": [
        {"type": "boolean"},
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kinds": {
                    "type": "array",
                    "items": {"type": "string"},
                    "uniqueItems": True,
                    "description": f"Kinds to mask (default all: {', '.join(KINDS)}).",
                },
                "patterns": {
                    "type": "array",
                    "description": "Custom patterns: {name, regex}; the placeholder is "
                    "[NAME_xxxxxxxx].",
                    "items": {
                        "type": "object",
                        "required": ["name", "regex"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "regex": {"type": "string"},
                        },
                    },
                },
            },
        },
    ],
}
