"""The memory store protocol and how a run's services find the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.engine.services import Services
from runtime.retrieval.memories import default_memory_path, open_memory_store
from runtime.retrieval.memory_store import EmptyMemoryStore, MemoryStore


def test_default_path_is_beside_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNTIME_MEMORIES", raising=False)
    assert default_memory_path("/data/x/index.db") == "/data/x/memories.db"
    monkeypatch.setenv("RUNTIME_MEMORIES", "/elsewhere/m.db")
    assert default_memory_path("/data/x/index.db") == "/elsewhere/m.db"


def test_reading_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    store = open_memory_store(str(tmp_path / "none.db"))
    assert isinstance(store, MemoryStore)
    assert store.search_memories("orders", limit=5) == []
    assert not (tmp_path / "none.db").exists()


def test_services_use_the_given_store_and_share_it_on_derive() -> None:
    given = EmptyMemoryStore()
    services = Services(memory_store=given)
    assert services.memory_store is given
    assert services.derive(model_spec=None, index_path=None, environ=None).memory_store is given


def test_services_open_the_file_settings_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNTIME_MEMORIES", raising=False)
    named = str(tmp_path / "team.db")
    services = Services(settings={"memory_store": named}, index_path=str(tmp_path / "i.db"))
    assert services.memory_store.path == named
    beside = Services(index_path=str(tmp_path / "sub" / "i.db"))
    assert beside.memory_store.path == str(tmp_path / "sub" / "memories.db")
