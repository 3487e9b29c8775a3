"""Where the shipped pipelines and schema live, in a source checkout or an installed wheel."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """The `pipelines` or `schemas` folder: the checkout's, else the installed data package's."""
    if name not in ("pipelines", "schemas"):
        raise ValueError(f"unknown data folder {name!r}")
    local = _ROOT / name
    if local.is_dir():
        return local
    return Path(str(resources.files(f"step_runtime_data.{name}")))


def schema_path() -> Path:
    """The checked-in pipeline JSON Schema."""
    return data_dir("schemas") / "pipeline.schema.json"
