"""CLI fixtures: a process registry holding only the test actions."""

from __future__ import annotations

import pytest

import runtime.contract.registry as registry_module


@pytest.fixture
def test_registry(registry, monkeypatch):
    """Make the CLI see only the test actions."""
    monkeypatch.setattr(registry_module, "_default", registry)
    return registry
