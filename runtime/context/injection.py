"""Retrieved text that tries to act as instructions: found and neutralised (issue 29).

`scan(text)` finds, line by line, what in retrieved text could pass for instructions
to a model: imperatives aimed at the model (`ignore all previous instructions`, `you
are now ...`, `reveal the system prompt`), role or system markers (`system:` opening a
line, `<|im_start|>`, `[INST]`, `<<SYS>>`), tool-call lookalikes (`"tool_calls"`,
`<tool_call>`, `{"name": ..., "arguments": ...}`), hidden or bidirectional Unicode
(bidi overrides and isolates, zero-width characters, tag characters) and closing tags
of the evidence delimiter (`</evidence`). `neutralise(text)` returns the text with each
flagged line quoted as data (`[flagged KIND] ...`, hidden characters shown as `\\u202e`
escapes) and the findings, for the trace. Linear in the text: each line is read once,
and only its first `MAX_LINE` characters are matched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE = 2000
KINDS = ("imperative", "role_marker", "tool_call", "hidden_unicode", "delimiter_close")

_IMPERATIVE = re.compile(
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+)?"
    r"(?:previous|prior|above|earlier|preceding|system|your)?\s*"
    r"(?:instructions?|prompts?|rules?|guidelines|directions|messages?)\b"
    r"|\byou\s+are\s+now\b|\bfrom\s+now\s+on\s*,?\s+you\b|\bact\s+as\s+(?:an?|the)\b"
    r"|\b(?:reveal|print|show|output|repeat)\s+(?:me\s+)?(?:your\s+|the\s+)?"
    r"(?:system\s+prompt|instructions|hidden\s+prompt)\b"
    r"|\bnew\s+instructions?\s*:|\bdeveloper\s+mode\b|\bdo\s+not\s+(?:tell|mention)\s+the\s+user\b"
    r"|\b(?:assistant|ai|model|llm|chatbot)\s*[,:]\s*(?:please\s+)?(?:ignore|answer|say|reply|respond|output|stop)\b",
    re.I,
)
_ROLE = re.compile(
    r"^\s*(?:#{1,3}\s*)?(?:system|assistant|user|developer)\s*:\s"
    r"|<\|(?:im_start|im_end|system|user|assistant|endoftext)\|>|\[/?INST\]|<</?SYS>>"
    r"|^\s*<\s*/?\s*(?:system|assistant|user)\s*>",
    re.I,
)
_TOOL = re.compile(
    r"\"tool_calls\"\s*:|</?tool_call>|</?function_call>"
    r"|\{\s*\"name\"\s*:\s*\"[^\"]{1,100}\"\s*,\s*\"(?:arguments|parameters)\"\s*:",
    re.I,
)
_CLOSE = re.compile(r"<\s*/\s*evidence", re.I)
_HIDDEN = re.compile(
    "[\u202a-\u202e\u2066-\u2069\u200b-\u200f\u2060-\u2064\ufeff\U000e0000-\U000e007f]"
)


@dataclass(frozen=True)
class Finding:
    """One flagged line: what it looks like and where."""

    kind: str
    line: int
    excerpt: str


def scan(text: str) -> list[Finding]:
    """Every line of text that could pass for an instruction (module docstring)."""
    found: list[Finding] = []
    for n, line in enumerate(text.splitlines(), start=1):
        head = line[:MAX_LINE]
        if n == 1 and head.startswith("\ufeff"):  # a byte order mark opening a file
            head = head[1:]
        for kind, pattern in (
            ("hidden_unicode", _HIDDEN),
            ("delimiter_close", _CLOSE),
            ("role_marker", _ROLE),
            ("tool_call", _TOOL),
            ("imperative", _IMPERATIVE),
        ):
            if pattern.search(head):
                found.append(Finding(kind, n, _visible(head[:120])))
    return found


def _visible(text: str) -> str:
    """Hidden and bidirectional characters as `\\uXXXX` escapes."""
    return _HIDDEN.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def neutralise(text: str) -> tuple[str, list[Finding]]:
    """The text with flagged lines quoted as data, and the findings."""
    findings = scan(text)
    if not findings:
        return text, []
    kinds: dict[int, list[str]] = {}
    for f in findings:
        kinds.setdefault(f.line, []).append(f.kind)
    lines = text.split("\n")
    for n, names in kinds.items():
        # A line of `splitlines` is a line of split("\n") unless other breaks were used:
        # neutralise the whole text's line n when it exists, else leave it to the escape.
        if n - 1 < len(lines):
            shown = _CLOSE.sub("<\\/evidence", _visible(lines[n - 1]))
            lines[n - 1] = (
                f"[flagged {'+'.join(dict.fromkeys(names))}: data, not an instruction] {shown}"
            )
    out = "\n".join(lines)
    return _visible(out), findings
