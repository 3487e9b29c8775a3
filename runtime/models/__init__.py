"""Model providers behind one interface, chosen by settings, a step's `model:`, or `--model`.

Spec strings (CLI `--model`, or a step's `model:` when it is not a settings name):
`extractive`, `replay:FILE`, `openai:MODEL`, `openai:MODEL@BASE_URL`, or a name in
`settings.models`. A CLI spec overrides every step, so one pipeline can be pointed
at another server by changing only `--model`. With nothing configured the
offline `extractive` responder answers. `record_path` wraps whatever was chosen.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime._access import mapping
from runtime.errors import ModelError
from runtime.models.base import ModelConfig, ModelProvider, ModelRequest, ModelResponse

__all__ = [
    "ModelConfig",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "config_from_spec",
    "resolve_provider",
]

_KNOWN = ("openai", "extractive", "replay")


def _config(name: str, raw: Mapping[str, Any]) -> ModelConfig:
    provider = raw.get("provider")
    if provider not in _KNOWN:
        raise ModelError(
            f"model {name!r}: provider must be one of {', '.join(_KNOWN)}",
            code="MODEL_CONFIG_INVALID",
        )
    fields = {k: v for k, v in raw.items() if k in ModelConfig.__dataclass_fields__ and k != "name"}
    try:
        return ModelConfig(name=name, **fields)
    except TypeError as exc:
        raise ModelError(f"model {name!r}: {exc}", code="MODEL_CONFIG_INVALID") from exc


def config_from_spec(spec: str, settings: Mapping[str, Any]) -> ModelConfig:
    """The configuration a spec string or settings name stands for."""
    models = mapping(settings.get("models"))
    if spec in models:
        return _config(spec, models[spec])
    if spec == "extractive":
        return ModelConfig("extractive", "extractive", model="extractive", context_window=128_000)
    if spec.startswith("replay:") and len(spec) > 7:
        return ModelConfig(
            spec, "replay", model="replay", cassette=spec[7:], context_window=1_000_000
        )
    if spec.startswith("openai:") and len(spec) > 7:
        model, _, url = spec[7:].partition("@")
        if not model:
            raise ModelError(f"bad model spec {spec!r}", code="MODEL_CONFIG_INVALID")
        base = url or os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        window = int(os.environ.get("RUNTIME_CONTEXT_WINDOW", "32768"))
        return ModelConfig(spec, "openai", model=model, base_url=base, context_window=window)
    if ":" in spec or not spec:
        raise ModelError(
            f"bad model spec {spec!r}; use extractive, replay:FILE, openai:MODEL[@URL] "
            "or a name from settings.models",
            code="MODEL_CONFIG_INVALID",
        )
    raise ModelError(
        f"unknown model {spec!r}: not in settings.models "
        f"({', '.join(sorted(models)) or 'none defined'})",
        code="MODEL_UNKNOWN",
    )


def _build(cfg: ModelConfig, base_dir: str | None) -> Any:
    if cfg.provider == "extractive":
        from runtime.models.extractive import ExtractiveProvider

        return ExtractiveProvider(cfg)
    if cfg.provider == "replay":
        from runtime.models.cassette import ReplayProvider

        path = Path(cfg.cassette)
        if not path.is_absolute() and base_dir and not path.exists():
            path = Path(base_dir) / path
        return ReplayProvider(cfg, str(path))
    from runtime.models.openai import OpenAIProvider

    return OpenAIProvider(cfg)


def resolve_provider(
    name: str | None,
    *,
    settings: Mapping[str, Any],
    cli_spec: str | None = None,
    record_path: str | None = None,
    base_dir: str | None = None,
) -> Any:
    """The provider for a step: CLI spec, else the step's model, else default_model, else extractive."""
    spec = cli_spec or name or settings.get("default_model") or "extractive"
    provider = _build(config_from_spec(str(spec), settings), base_dir)
    if record_path:
        from runtime.models.cassette import RecordingProvider

        provider = RecordingProvider(provider, record_path)
    return provider
