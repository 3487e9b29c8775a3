"""The action registry: one loading path for built-in and third-party actions.

Actions are found through the entry-point group ``step_runtime.actions`` (the
built-ins are declared there by this distribution too), loaded once and lazily.
A registry can also be built from given classes, for tests and embedding, so
installed plugins never leak in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from runtime.contract.action import Action, ActionInfo

GROUP = "step_runtime.actions"
_DIST = "step-runtime"


class Registry:
    """Maps action names to action classes."""

    def __init__(self, infos: Iterable[ActionInfo] = ()) -> None:
        self._infos: dict[str, ActionInfo] = {}
        for info in infos:
            self._infos[info.name] = info

    @classmethod
    def from_classes(cls, *classes: type[Action], source: str = "given") -> Registry:
        """A registry holding exactly these classes."""
        return cls(ActionInfo(c.name, c, source) for c in classes)

    @classmethod
    def from_entry_points(cls) -> Registry:
        """Load every action of the entry-point group (a failing plugin is kept as an error)."""
        from importlib.metadata import entry_points

        infos = []
        for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "unknown"
            source = "builtin" if dist == _DIST else dist
            try:
                obj = ep.load()
                if not (isinstance(obj, type) and issubclass(obj, Action)):
                    raise TypeError(f"{ep.value} is not an Action subclass")
                if obj.name != ep.name:
                    raise TypeError(
                        f"{ep.value} declares name {obj.name!r}, entry point says {ep.name!r}"
                    )
                infos.append(ActionInfo(ep.name, obj, source))
            except Exception as exc:  # a broken plugin becomes a diagnostic, not a crash
                infos.append(
                    ActionInfo(ep.name, None, source, error=f"{type(exc).__name__}: {exc}")
                )
        return cls(infos)

    def register(self, action: type[Action], source: str = "given") -> None:
        """Add or replace an action."""
        self._infos[action.name] = ActionInfo(action.name, action, source)

    def get(self, name: str) -> type[Action] | None:
        """The action class, or None when unknown or failed to load."""
        info = self._infos.get(name)
        return info.cls if info else None

    def names(self) -> list[str]:
        """Names of the loadable actions, sorted."""
        return sorted(n for n, i in self._infos.items() if i.cls is not None)

    def infos(self) -> list[ActionInfo]:
        """Every entry, loadable or not, sorted by name."""
        return [self._infos[n] for n in sorted(self._infos)]

    def failures(self) -> list[ActionInfo]:
        """Entries that failed to load."""
        return [i for i in self.infos() if i.cls is None]


_default: Registry | None = None
_lock = threading.Lock()


def default_registry() -> Registry:
    """The process-wide registry from entry points, loaded once."""
    global _default
    with _lock:
        if _default is None:
            _default = Registry.from_entry_points()
        return _default


# The registry the validator is checking with, for checks that validate nested steps (the
# branches of map and parallel steps, actions/branches.py) with the same actions.
_ACTIVE: ContextVar[Registry | None] = ContextVar("step_runtime_active_registry", default=None)
# The file of the pipeline being checked (where its prompts are found), for the same checks.
_FILE: ContextVar[str | None] = ContextVar("step_runtime_active_file", default=None)


def active_registry() -> Registry:
    """The registry of the validation in progress, else the default one."""
    return _ACTIVE.get() or default_registry()


def active_file() -> str | None:
    """The file of the pipeline being validated, when one is."""
    return _FILE.get()


@contextmanager
def checking_with(registry: Registry, file: str | None = None) -> Iterator[None]:
    """Make `registry` (and the pipeline file) the active ones for the checks inside."""
    token = _ACTIVE.set(registry)
    file_token = _FILE.set(file)
    try:
        yield
    finally:
        _FILE.reset(file_token)
        _ACTIVE.reset(token)
