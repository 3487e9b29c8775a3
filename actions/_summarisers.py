"""Installs the code summariser: the classifiers' compaction, which the context layer may not import.

runtime/context sits below classifiers in the import layers (pyproject, import-linter),
so runtime/context/summarize.py leaves `code` empty and the action layer, which may
import both, registers it here. Importing any action that summarises (call_model,
rehydrate) installs it.
"""

from __future__ import annotations

from typing import Any

from runtime.context import summarize

_HEAD = 20_000  # language detection reads the head of a payload, not all of it


def _language(text: str) -> str:
    from classifiers.code_classifier import language_only

    return language_only(text[:_HEAD])


def summarise_code(text: str, budget: int, counter: Any) -> str:
    """C# skeleton or T-SQL object summary (classifiers.compact) within budget tokens."""
    from classifiers import compact

    language = _language(text)
    intro = f"code ({language}): {len(text):,} characters, {summarize.line_count(text):,} lines"
    room = budget - counter.count(intro) - 1
    body = compact(text, language, max(room, 1), counter) if room > 0 else ""
    return f"{intro}\n{body}" if body else intro


def is_code(text: str) -> bool:
    """True when the classifiers see C# or T-SQL in the payload's head."""
    return _language(text) in ("sql", "dotnet")


summarize.register("code", summarise_code, is_code)
