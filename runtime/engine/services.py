"""Services that actions run against: tokens, models, the node store.

The engine hands one `Services` to every step. Each service is created lazily on
first use (heavy libraries load only when a step needs them) and may be injected
by an embedding application. `runtime` modules only, never concrete actions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any


class Services:
    """Lazily created, injectable services shared by the steps of a run."""

    def __init__(
        self,
        *,
        settings: Mapping[str, Any] | None = None,
        token_counter: Any = None,
        model_provider: Any = None,
        node_store: Any = None,
        index_path: str | None = None,
        model_spec: str | None = None,
        record_path: str | None = None,
        base_dir: str | None = None,
        on_model_chunk: Callable[[str], None] | None = None,
        pointer_store: Any = None,
        environ: Mapping[str, str] | None = None,
        memory_store: Any = None,
        memory_path: str | None = None,
        evidence_hook: Any = None,
    ) -> None:
        self.settings: Mapping[str, Any] = settings or {}
        self._token_counters: dict[str, Any] = {}
        if token_counter is not None:
            self._token_counters[getattr(token_counter, "encoding_name", "default")] = token_counter
            self._default_counter = token_counter
        else:
            self._default_counter = None
        self._model_provider = model_provider
        self._providers: dict[str, Any] = {}
        self._node_store = node_store
        self._node_store_given = node_store is not None
        self.index_path = index_path
        self.model_spec = model_spec
        self.record_path = record_path
        self.base_dir = base_dir
        self.on_model_chunk = on_model_chunk
        # Originals behind context pointers (runtime/context/pointers.py): the run store's
        # tables when the engine has a store (Engine sets it), else memory.
        self.pointer_store = pointer_store
        # What model specs resolve against ($OPENAI_BASE_URL, ...); None: os.environ. A
        # resumed run's copy reads the values its start recorded (runtime/engine/choices.py).
        self.environ = environ
        # Memories, experiences and values (runtime/retrieval/memory_store.py): the store
        # given, else the file memory_path, $RUNTIME_MEMORIES or memories.db beside the index.
        self._memory_store = memory_store
        self._memory_store_given = memory_store is not None
        self.memory_path = memory_path
        # Shapes the evidence fetch_node_texts takes (runtime/context/evidence_hook.py): set
        # by `runtime eval` per run to inject distractors and place evidence; None otherwise.
        self.evidence_hook = evidence_hook
        self._lock = threading.Lock()
        # The run store and registry of the engine using these services (set by Engine):
        # branch steps run their branches as runs of their own with them.
        self.run_store: Any = None
        self.registry: Any = None

    @property
    def model_provider(self) -> Any:
        """The provider given to the constructor (an embedding application's), or None."""
        return self._model_provider

    @property
    def given_token_counter(self) -> Any:
        """The default token counter given to the constructor, or None (settings.tokenizer)."""
        return self._default_counter

    @property
    def given_node_store(self) -> Any:
        """The node store given to the constructor, or None (then it opens index_path)."""
        return self._node_store if self._node_store_given else None

    def derive(
        self, *, model_spec: str | None, index_path: str | None, environ: Mapping[str, str] | None
    ) -> Services:
        """A copy for one resumed run, with its own model spec, index and environment.

        Given services (token counter, model provider, node store, pointer store) are
        shared; providers and the node store opened from a path are created anew, so the
        runs sharing this object are not affected.
        """
        return Services(
            settings=self.settings,
            token_counter=self._default_counter,
            model_provider=self._model_provider,
            node_store=self.given_node_store,
            index_path=index_path,
            model_spec=model_spec,
            record_path=self.record_path,
            base_dir=self.base_dir,
            on_model_chunk=self.on_model_chunk,
            pointer_store=self.pointer_store,
            environ=environ,
            memory_store=self._memory_store if self._memory_store_given else None,
            memory_path=self.memory_path,
            evidence_hook=self.evidence_hook,
        )

    def tokens(self, encoding: str | None = None) -> Any:
        """The TokenCounter for an encoding (default: settings.tokenizer, else cl100k_base)."""
        if encoding is None and self._default_counter is not None:
            return self._default_counter
        name = encoding or str(self.settings.get("tokenizer") or "cl100k_base")
        with self._lock:
            counter = self._token_counters.get(name)
            if counter is None:
                from runtime.context.tokens import get_counter

                counter = get_counter(name)
                self._token_counters[name] = counter
        return counter

    def tokens_for(self, config: Any) -> Any:
        """The TokenCounter of a model configuration: its tokenizer (`server`: its server's)."""
        if config.tokenizer != "server":
            return self.tokens(config.tokenizer)
        from runtime.context.tokens import counter_for

        return counter_for(config)

    def model(self, name: str | None = None) -> Any:
        """The model provider for a named model (settings.models), the CLI spec, or the default.

        Providers are created once per name and shared by the run's steps, so a replay
        cassette and a recording keep one position and one file.
        """
        with self._lock:
            if self._model_provider is not None and (name is None or self.model_spec):
                return self._model_provider
            key = self.model_spec or name or ""
            provider = self._providers.get(key)
            if provider is None:
                from runtime.models import resolve_provider
                from runtime.models.config import resolving_with

                with resolving_with(self.environ) if self.environ is not None else nullcontext():
                    provider = resolve_provider(
                        name,
                        settings=self.settings,
                        cli_spec=self.model_spec,
                        record_path=self.record_path,
                        base_dir=self.base_dir,
                    )
                self._providers[key] = provider
            return provider

    @property
    def pointers(self) -> Any:
        """The pointer store: the one given or set by the engine, else an in-memory one."""
        with self._lock:
            if self.pointer_store is None:
                from runtime.context.pointers import MemoryPointerStore

                self.pointer_store = MemoryPointerStore()
            return self.pointer_store

    @property
    def packs(self) -> Any:
        """Where model calls' context packs go: the run store when it keeps them, else memory."""
        with self._lock:
            store = self.pointer_store
            if store is not None and hasattr(store, "save_pack"):
                return store
            if getattr(self, "_pack_store", None) is None:
                from runtime.context.packs import MemoryPackStore

                self._pack_store = MemoryPackStore()
            return self._pack_store

    @property
    def node_store(self) -> Any:
        """The node store (opened from index_path, RUNTIME_INDEX or .runtime/index.db)."""
        with self._lock:
            if self._node_store is None:
                from runtime.retrieval.indexes import open_index

                self._node_store = open_index(self.index_path)
            return self._node_store

    @property
    def memory_store(self) -> Any:
        """The memory store (MemoryStore): given, else opened from memory_path, settings
        `memory_store`, $RUNTIME_MEMORIES or memories.db beside the node index."""
        with self._lock:
            if self._memory_store is None:
                from runtime.retrieval.memories import open_memory_store

                named = self.memory_path or self.settings.get("memory_store")
                self._memory_store = open_memory_store(
                    str(named) if named else None, index_path=self.index_path
                )
            return self._memory_store

    def memory_writer(self) -> Any:
        """The memory store to write to: the one given, else the file memory_store names,
        created when missing (the `remember` and `record_experience` actions)."""
        with self._lock:
            if self._memory_store_given:
                return self._memory_store
            current = self._memory_store
            if current is None or not hasattr(current, "remember"):
                from runtime.retrieval.memories import open_memory_store

                named = self.memory_path or self.settings.get("memory_store")
                self._memory_store = open_memory_store(
                    str(named) if named else None, index_path=self.index_path, create=True
                )
            return self._memory_store
