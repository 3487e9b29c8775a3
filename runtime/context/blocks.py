"""The context block format shared by every step that renders nodes for a model.

    --- NODE ---
    id: <node id>
    path: <path or source>
    language: sql | dotnet | unknown
    compact: true | false
    metadata:
    <key: value lines, only when metadata is requested>
    text:
    <node text>

Fields appear in this order; absent fields are omitted. The text comes last, so a
count carried with a node's text (`tokens`, made by the indexer and handed on by
fetch_node_texts) gives its block's count with only the lines before it encoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.context.tokens import TokenCounter

HEADER = "--- NODE ---"
TEXT_LINE = "\ntext:\n"
_ID_LINE = re.compile(r"^id: (.+)$", re.M)


def format_block(
    item: Mapping[str, Any],
    *,
    compact: bool | None = None,
    text: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> str:
    """One node as a context block."""
    lines = [HEADER]
    for key in ("id", "path", "language"):
        if item.get(key) not in (None, ""):
            lines.append(f"{key}: {item[key]}")
    if compact is not None:
        lines.append(f"compact: {'true' if compact else 'false'}")
    if metadata:
        lines.append("metadata:")
        for key, value in metadata.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"{key}: {shown}")
    lines.append("text:")
    lines.append(item.get("text", "") if text is None else text)
    return "\n".join(lines)


def as_evidence(value: Any) -> Any:
    """Node records (a list of mappings with `id` and `text`, as fetch_node_texts writes
    node_texts) as context blocks, so a prompt frames them as evidence; else value as is.

    Retrieved text is data: handed to a prompt as JSON it would stand outside the evidence
    delimiter, as if it were the prompt's own words.
    """
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(v, Mapping) and isinstance(v.get("text"), str) and "id" in v for v in value
        )
    ):
        return [format_block(v) for v in value]
    return value


def split_block(block: str) -> tuple[str, str]:
    """(header, text) of a block: everything up to and including its `text:` line, the rest.

    The header is what identifies the node (id, path, language, compact, metadata): the
    context policy elides only the text behind a pointer, so a summarised block is still
    cited as its node. A string that is no block is all text (its header is "").
    """
    if not block.startswith(HEADER):
        return "", block
    at = block.find(TEXT_LINE)
    if at < 0:
        return "", block  # no text line: nothing tells where the text starts
    end = at + len(TEXT_LINE)
    return block[:end], block[end:]


def split_blocks(text: str) -> list[str]:
    """A string of blocks cut before each block header (the first piece may be no block).

    Joined again, the pieces are the string; each piece after the first starts with HEADER
    and holds no other header.
    """
    pieces = text.split(HEADER)
    return [p for p in pieces[:1] if p] + [HEADER + p for p in pieces[1:]]


_ID_FIRST = HEADER + "\nid: "


def block_id(block: str) -> str | None:
    """The node id of a block (None for other strings, such as a batch marker)."""
    if block.startswith(_ID_FIRST):
        # The id line right after the header, as format_block writes it: the line itself,
        # what the search below finds first (a line holds no "\ntext:\n"), without a scan.
        start = len(_ID_FIRST)
        end = block.find("\n", start)
        value = block[start:] if end < 0 else block[start:end]
        if value:
            return value.strip()
    if not block.startswith(HEADER):
        return None
    m = _ID_LINE.search(block, 0, block.find("\ntext:\n") if "\ntext:\n" in block else len(block))
    return m.group(1).strip() if m else None


def selected_metadata(meta: Mapping[str, Any], fields: Sequence[str] | None) -> dict[str, Any]:
    """The metadata lines a step asked for (all scalar/list fields when fields is None)."""
    if fields is not None:
        return {k: meta[k] for k in fields if k in meta}
    return {k: v for k, v in meta.items() if k not in ("text",) and v not in (None, "", [], {})}


def seed_block(counter: TokenCounter, block: str, item: Mapping[str, Any]) -> bool:
    """Let counter count block from the count item carries for its text; False if it has none.

    The count is used only when it is for the counter's encoding and cut rule and the
    item's text is the text it was made for (counter.carried); otherwise the block is
    counted when it is needed, as it always was.
    """
    text = item.get("text")
    if not isinstance(text, str) or not block.endswith(text):
        return False
    parts = counter.carried(text, item.get("tokens"))
    if parts is None:
        return False
    counter.seed_suffix(block, len(block) - len(text), parts)
    return True
