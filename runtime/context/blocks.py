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

Fields appear in this order; absent fields are omitted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

HEADER = "--- NODE ---"
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


def block_id(block: str) -> str | None:
    """The node id of a block (None for other strings, such as a batch marker)."""
    if not block.startswith(HEADER):
        return None
    m = _ID_LINE.search(block, 0, block.find("\ntext:\n") if "\ntext:\n" in block else len(block))
    return m.group(1).strip() if m else None


def selected_metadata(meta: Mapping[str, Any], fields: Sequence[str] | None) -> dict[str, Any]:
    """The metadata lines a step asked for (all scalar/list fields when fields is None)."""
    if fields is not None:
        return {k: meta[k] for k in fields if k in meta}
    return {k: v for k, v in meta.items() if k not in ("text",) and v not in (None, "", [], {})}
