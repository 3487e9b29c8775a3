"""Model providers behind one interface, chosen by settings, a step's `model:`, or `--model`.

Precedence: the CLI spec (overrides every step, so one pipeline can be pointed at
another server by changing only `--model`), else the step's `model:`, else
`settings.default_model`, else the offline `extractive` responder. Every provider is
wrapped so no configured secret leaves in a reply or an error (`guard`); `record_path`
wraps that. The spec grammar is in `runtime.models.config`.
Provider modules load lazily: importing this package imports no HTTP client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.errors import ModelError
from runtime.models.base import ModelConfig, ModelProvider, ModelRequest, ModelResponse
from runtime.models.config import check_settings, config_from_settings, config_from_spec

__all__ = [
    "ModelConfig",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "build_provider",
    "check_settings",
    "config_from_settings",
    "config_from_spec",
    "resolve_config",
    "resolve_provider",
    "spec_for",
]


def build_provider(config: ModelConfig) -> ModelProvider:
    """The provider object for a validated configuration."""
    if config.provider == "extractive":
        from runtime.models.extractive import ExtractiveProvider

        return ExtractiveProvider(config)
    if config.provider == "scripted":
        from runtime.models.scripted import ScriptedProvider

        return ScriptedProvider(config)
    if config.provider == "replay":
        from runtime.models.cassette import ReplayProvider

        return ReplayProvider(config, config.cassette)
    if config.provider == "openai":
        from runtime.models.openai import OpenAIProvider

        return OpenAIProvider(config)
    raise ModelError(f"unknown provider {config.provider!r}", code="MODEL_CONFIG_INVALID")


def spec_for(name: str | None, settings: Mapping[str, Any]) -> str:
    """The spec a model name stands for without --model: itself, else default_model, else extractive."""
    spec = name if name is not None else settings.get("default_model")
    return "extractive" if spec is None else spec


def resolve_config(
    name: str | None,
    *,
    settings: Mapping[str, Any],
    cli_spec: str | None = None,
    base_dir: str | None = None,
) -> ModelConfig:
    """The configuration a step's model resolves to (see resolve_provider)."""
    if cli_spec is not None:
        return config_from_spec(cli_spec, settings, base_dir=base_dir, spec_dir=None)
    return config_from_spec(
        spec_for(name, settings), settings, base_dir=base_dir, spec_dir=base_dir
    )


def resolve_provider(
    name: str | None,
    *,
    settings: Mapping[str, Any],
    cli_spec: str | None = None,
    record_path: str | None = None,
    base_dir: str | None = None,
) -> ModelProvider:
    """The provider for a step: CLI spec, else the step's model, else default_model, else extractive.

    base_dir is the pipeline's folder: relative cassettes named in the pipeline resolve
    against it; a relative `replay:FILE` on the command line resolves against the
    working directory.
    """
    config = resolve_config(name, settings=settings, cli_spec=cli_spec, base_dir=base_dir)
    from runtime.models.guard import ScrubbingProvider

    # The boundary: whatever answers, no configured secret leaves in a reply or an error.
    provider: ModelProvider = ScrubbingProvider(build_provider(config), settings)
    if record_path:
        from runtime.models.cassette import RecordingProvider

        provider = RecordingProvider(provider, record_path, settings)
    return provider
