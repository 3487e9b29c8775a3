"""Reading evidence blocks and the question back out of a rendered prompt.

Blocks use the shared context block format (`runtime.context.blocks`). Prompts may wrap
them in delimiters (`<evidence> ... </evidence>`, `=== new evidence ===`); a
block's text ends at the next block header or at a closing delimiter tag alone on
its line, so the prompt text after the evidence is not mistaken for node text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runtime.context.blocks import HEADER

_CLOSING_TAG = re.compile(r"^\s*</[A-Za-z][\w:.-]*\s*>\s*$")
_OPENING_TAG = re.compile(r"^\s*<[A-Za-z][\w:.-]*(\s[^<>]*)?>\s*$")
_FIELD = re.compile(r"^([A-Za-z_][\w-]*):(?: (.*))?$")
_QUESTION = re.compile(r"^\s*question\s*:\s*(\S.*)$", re.I)


@dataclass
class Block:
    """One evidence block: header fields and text."""

    id: str = ""
    path: str = ""
    language: str = "unknown"
    compact: bool = False
    text: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class Prompt:
    """A message split into its evidence blocks and the text around them."""

    blocks: list[Block]
    outside: list[str]


def split_prompt(text: str) -> Prompt:
    """The blocks of a message and its remaining lines (delimiter tags dropped)."""
    blocks: list[Block] = []
    outside: list[str] = []
    block: Block | None = None
    section = "header"  # header | metadata | text
    body: list[str] = []

    def finish() -> None:
        if block is not None:
            block.text = "\n".join(body).strip("\n")
            blocks.append(block)

    for line in text.splitlines():
        if line.strip() == HEADER:
            finish()
            block, section, body = Block(), "header", []
            continue
        if block is None:
            if not (_CLOSING_TAG.match(line) or _OPENING_TAG.match(line)):
                outside.append(line)
            continue
        if section == "text":
            if _CLOSING_TAG.match(line):
                finish()
                block = None
            else:
                body.append(line)
            continue
        m = _FIELD.match(line.strip())
        if line.strip() == "text:":
            section = "text"
        elif line.strip() == "metadata:":
            section = "metadata"
        elif m and section == "metadata":
            block.metadata[m.group(1)] = m.group(2) or ""
        elif m:
            _set_field(block, m.group(1), m.group(2) or "")
        else:
            section = "text"  # a header without `text:`: read on as text rather than drop it
            body.append(line)
    finish()
    return Prompt(blocks, outside)


def _set_field(block: Block, key: str, value: str) -> None:
    if key == "id":
        block.id = value.strip()
    elif key == "path":
        block.path = value.strip()
    elif key == "language":
        block.language = value.strip() or "unknown"
    elif key == "compact":
        block.compact = value.strip().lower() == "true"
    else:
        block.metadata[key] = value


def question_of(text: str) -> str:
    """The question in a user message: a `Question:` line outside the evidence, else the rest."""
    outside = split_prompt(text).outside
    for line in outside:
        m = _QUESTION.match(line)
        if m:
            return m.group(1).strip()
    return " ".join(" ".join(outside).split())
