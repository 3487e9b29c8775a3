"""Typed access to loosely shaped pipeline data (YAML and JSON values)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: Any) -> Mapping[str, Any]:
    """The value when it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    """The value when it is a list, else an empty one."""
    return value if isinstance(value, list) else []
