"""Compatibility path: the services actions run against live in `runtime.engine.services`."""

from runtime.engine.services import Services

__all__ = ["Services"]
