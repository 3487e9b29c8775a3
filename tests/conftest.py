"""Shared fixtures: tiny test-only actions and a registry holding exactly them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from runtime.action import Action, Outcome, Problem, Transition
from runtime.registry import Registry


class Noop(Action):
    """Does nothing; follows `next`."""

    name = "noop"
    summary = "Do nothing."
    fields = {
        "note": {"type": "string"},
        "count": {"type": "integer", "minimum": 1},
        "count_from_settings": {"type": "string"},
    }
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        return None


class Guard(Action):
    """A loop bound with on_allow / on_deny."""

    name = "guard"
    summary = "Bound a loop."
    fields = {
        "on_allow": {"type": "string"},
        "on_deny": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
    }
    required = ("on_allow", "on_deny")
    outcomes = ("allow", "deny")
    bounds_loops = True
    runnable = True


class Router(Action):
    """Routes by a `routes` mapping (decision -> step id)."""

    name = "router"
    summary = "Route."
    fields = {
        "routes": {"type": "object", "additionalProperties": {"type": "string"}},
        "on_other": {"type": "string"},
        "topic": {"type": "string"},
    }
    required = ("routes", "on_other")
    outcomes = ("other",)

    @classmethod
    def targets(cls, step: Mapping[str, Any]) -> Iterator[Transition]:
        yield from super().targets(step)
        for key, target in (step.get("routes") or {}).items():
            if isinstance(target, str):
                yield Transition(f"route {key}", ("routes", key), target)


class Sender(Action):
    """Sends inbox messages to `targets`; checks `low` <= `high`."""

    name = "sender"
    summary = "Send."
    fields = {
        "targets": {"type": "object"},
        "low": {"type": "number"},
        "high": {"type": "number"},
        "prompt_key": {"type": "string"},
    }

    @classmethod
    def inbox_targets(cls, step: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
        for key in step.get("targets") or {}:
            yield ("targets", key), key

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        low, high = step.get("low"), step.get("high")
        if isinstance(low, int | float) and isinstance(high, int | float) and low > high:
            yield Problem("BUDGET_CANNOT_FIT", f"low {low} is above high {high}", ("low",))


class Finish(Action):
    """Ends the run."""

    name = "finish"
    summary = "End."
    terminal = True
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


TEST_ACTIONS = (Noop, Guard, Router, Sender, Finish)


@pytest.fixture
def registry() -> Registry:
    """A registry with only the test actions (installed plugins never leak in)."""
    return Registry.from_classes(*TEST_ACTIONS)


# --- retrieval fixtures: the sample codebase indexed once per session ------------------
from pathlib import Path as _Path  # noqa: E402

SAMPLE_ROOT = _Path(__file__).resolve().parent.parent / "pipelines" / "sample" / "eshop"


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory):
    """The eshop sample indexed as repository `eshop`, with procedures labelled confidential."""
    from runtime.indexer import index_paths
    from runtime.nodestore import open_store

    path = tmp_path_factory.mktemp("index") / "index.db"
    store = open_store(str(path), create=True)
    index_paths(
        store,
        [str(SAMPLE_ROOT)],
        repository="eshop",
        snapshot="main",
        label_rules=[("Database/Procedures/usp_CapturePayment.sql", ["confidential"])],
    )
    return store
