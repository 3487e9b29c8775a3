"""Loading the access engine settings.access names (docs/access.md).

`builtin`, `cedar` and `opa` are built in; any other name is looked up in the
`step_runtime.access_engines` entry-point group (a class taking the settings.access
mapping and the pipeline's folder, implementing access_policy.AccessEngine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.errors import RunError
from runtime.governance.access_policy import (
    BUILTIN_ENGINES,
    ENTRY_POINT_GROUP,
    AccessEngine,
    BuiltinEngine,
)


def load_engine(config: Mapping[str, Any] | None, base_dir: str = ".") -> AccessEngine:
    """The engine `settings.access` names (builtin when none); ACCESS_POLICY_INVALID else."""
    config = dict(config or {})
    name = config.get("engine", "builtin")
    if name == "builtin":
        return BuiltinEngine(config, base_dir)
    if name == "cedar":
        from runtime.governance.cedar import CedarEngine

        return CedarEngine(config, base_dir)
    if name == "opa":
        from runtime.governance.opa import OpaEngine

        return OpaEngine(config, base_dir)
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = sorted(
            {*BUILTIN_ENGINES, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))}
        )
        raise RunError(
            f"settings.access.engine {name!r} is no access engine; known: {', '.join(known)}",
            code="ACCESS_POLICY_INVALID",
        )
    try:
        cls = found[0].load()
        engine: AccessEngine = cls(config, base_dir)
    except RunError:
        raise
    except Exception as exc:  # a plugin's own failure: coded, naming it
        raise RunError(
            f"access engine {name!r} ({found[0].value}) failed to load: {exc}",
            code="ACCESS_POLICY_INVALID",
        ) from exc
    return engine
