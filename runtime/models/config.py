"""Model configuration: `settings.models` entries and spec strings, validated into ModelConfig.

Spec grammar (the CLI `--model`, a step's `model:`, `settings.default_model`)::

    spec     := NAME                      a key of settings.models (checked first)
              | "extractive"              the offline responder
              | "scripted" [":" FILE]     the deterministic tool caller (runtime/models/scripted.py)
              | "replay:" FILE            a cassette
              | "openai:" MODEL           OpenAI-compatible, $OPENAI_BASE_URL or api.openai.com
              | "openai:" MODEL "@" URL   OpenAI-compatible at URL (http or https)

MODEL runs to the first `@`, so Ollama names such as `qwen2.5-coder:7b` work.
Anything else with a `:` is `MODEL_CONFIG_INVALID`; a plain unknown name is `MODEL_UNKNOWN`.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runtime.errors import ModelError
from runtime.models.base import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_DEADLINE,
    EXTRACTIVE_CONTEXT_WINDOW,
    REPLAY_CONTEXT_WINDOW,
    ModelConfig,
)
from runtime.net.secrets import url_credentials

PROVIDERS = ("openai", "extractive", "replay")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Environment variables read for ad-hoc `openai:` specs (settings entries say it in YAML).
BASE_URL_ENV = "OPENAI_BASE_URL"
CONTEXT_WINDOW_ENV = "RUNTIME_CONTEXT_WINDOW"
TOKENIZER_ENV = "RUNTIME_TOKENIZER"
DEADLINE_ENV = "RUNTIME_DEADLINE_SECONDS"
TOKEN_MARGIN_ENV = "RUNTIME_TOKEN_MARGIN"
SETTING_KEYS = (
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "context_window",
    "tokenizer",
    "token_margin",
    "timeout_seconds",
    "connect_timeout_seconds",
    "deadline_seconds",
    "max_retries",
    "headers",
    "cassette",
    "structured_output",
    "stream",
    "later_system",
)
# Provider options of openai models (runtime/models/base.py ModelConfig says what each does).
OPENAI_CHOICES = {
    "structured_output": ("json_schema", "json_object", "none"),
    "later_system": ("user", "keep"),
}
MAX_RETRIES_LIMIT = 10
# A day: longer is a mistake, and beyond the timer's range (threading.TIMEOUT_MAX) the
# deadline's timer thread would die with an OverflowError instead of ever firing.
MAX_SECONDS = 86_400
# Credentials belong in the environment (api_key_env), never in a pipeline file or a spec.
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "api-key", "x-api-key"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEFAULT_WINDOW = {
    "openai": DEFAULT_CONTEXT_WINDOW,
    "extractive": EXTRACTIVE_CONTEXT_WINDOW,
    "replay": REPLAY_CONTEXT_WINDOW,
}


def _invalid(where: str, message: str) -> ModelError:
    return ModelError(f"{where}: {message}", code="MODEL_CONFIG_INVALID")


def check_base_url(url: str, where: str) -> str:
    """The URL when it is an http(s) URL without credentials, else MODEL_CONFIG_INVALID.

    Credentials are refused wherever they sit: user-info (`user:key@`), a query string
    (`?api_key=...`) or a fragment; a base URL takes paths appended, so neither of the
    last two can be right in one anyway.
    """
    credentials = url_credentials(url)
    if credentials is not None:
        # Checked first and not echoed: the URL may hold a credential.
        raise _invalid(where, f"base_url {credentials}; put the key in api_key_env")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _invalid(where, "base_url is not a URL") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid(where, f"base_url {url!r} must be an http:// or https:// URL")
    return url


def _positive_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _invalid(where, f"{key} must be a positive integer, not {value!r}")
    return value


def _positive_number(value: Any, key: str, where: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0 or value > MAX_SECONDS:
        raise _invalid(
            where,
            f"{key} must be a positive number of seconds up to {MAX_SECONDS:,}, not {value!r}",
        )
    return float(value)


def _text(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(where, f"{key} must be a non-empty string")
    return value


def _headers(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _invalid(where, "headers must map header names to strings")
    secret = sorted(k for k in value if k.lower() in _SECRET_HEADERS)
    if secret:
        raise _invalid(
            where, f"header {secret[0]!r} holds a credential; name its variable in api_key_env"
        )
    return dict(value)


def config_from_settings(name: str, raw: Any, *, base_dir: str | None = None) -> ModelConfig:
    """Validate one `settings.models` entry; a relative cassette resolves against base_dir."""
    where = f"settings.models.{name}"
    if not isinstance(raw, Mapping):
        raise _invalid(where, "must be a mapping")
    unknown = sorted(str(k) for k in raw if k not in SETTING_KEYS)
    if unknown:
        raise _invalid(
            where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(SETTING_KEYS)}"
        )
    provider = raw.get("provider")
    if provider not in PROVIDERS:
        raise _invalid(where, f"provider must be one of {', '.join(PROVIDERS)}, not {provider!r}")
    values: dict[str, Any] = {"context_window": _DEFAULT_WINDOW[provider]}
    if "model" in raw:
        values["model"] = _text(raw["model"], "model", where)
    elif provider == "openai":
        raise _invalid(where, "an openai model needs `model`")
    else:
        values["model"] = provider
    if provider == "openai":
        url = raw["base_url"] if "base_url" in raw else _default_base_url()
        values["base_url"] = check_base_url(_text(url, "base_url", where), where)
    elif "base_url" in raw:
        raise _invalid(where, f"base_url applies to openai models, not {provider}")
    if "api_key_env" in raw:
        env = raw["api_key_env"]
        if not isinstance(env, str) or not _ENV_NAME.match(env):
            raise _invalid(where, "api_key_env must name an environment variable")
        values["api_key_env"] = env
    if "context_window" in raw:
        values["context_window"] = _positive_int(raw["context_window"], "context_window", where)
    if "tokenizer" in raw:
        values["tokenizer"] = check_tokenizer(raw["tokenizer"], provider, where, base_dir)
    if "token_margin" in raw:
        values["token_margin"] = check_margin(raw["token_margin"], where)
    for key in ("timeout_seconds", "connect_timeout_seconds", "deadline_seconds"):
        if key in raw:
            values[key] = _positive_number(raw[key], key, where)
    deadline = values.get("deadline_seconds", DEFAULT_DEADLINE)
    for key in ("timeout_seconds", "connect_timeout_seconds"):
        if values.get(key, 0.0) > deadline:
            # Loud, not silently capped: a raised read timeout means a slow server is expected.
            raise _invalid(
                where,
                f"{key} ({values[key]:g}) exceeds deadline_seconds ({deadline:g}), which "
                "bounds the whole request; raise deadline_seconds too",
            )
    if "max_retries" in raw:
        retries = raw["max_retries"]
        if (
            isinstance(retries, bool)
            or not isinstance(retries, int)
            or not 0 <= retries <= MAX_RETRIES_LIMIT
        ):
            raise _invalid(where, f"max_retries must be an integer 0..{MAX_RETRIES_LIMIT}")
        values["max_retries"] = retries
    if "headers" in raw:
        values["headers"] = _headers(raw["headers"], where)
    for key, allowed in OPENAI_CHOICES.items():
        if key in raw:
            if provider != "openai":
                raise _invalid(where, f"{key} applies to openai models, not {provider}")
            if raw[key] not in allowed:
                raise _invalid(
                    where, f"{key} must be one of {', '.join(allowed)}, not {raw[key]!r}"
                )
            values[key] = raw[key]
    if "stream" in raw:
        if provider != "openai":
            raise _invalid(where, f"stream applies to openai models, not {provider}")
        if not isinstance(raw["stream"], bool):
            raise _invalid(where, f"stream must be true or false, not {raw['stream']!r}")
        values["stream"] = raw["stream"]
    if provider == "replay":
        cassette = Path(_text(raw.get("cassette"), "cassette", where))
        if not cassette.is_absolute() and base_dir:
            cassette = Path(base_dir) / cassette
        values["cassette"] = str(cassette)
    elif "cassette" in raw:
        raise _invalid(where, f"cassette applies to replay models, not {provider}")
    return ModelConfig(name=name, provider=provider, **values)


def check_tokenizer(value: Any, provider: str, where: str, base_dir: str | None) -> str:
    """A model's tokenizer: a tiktoken encoding, `server` (openai models) or `hf:PATH`.

    A relative PATH resolves against base_dir and must name a file (without a base_dir,
    as in a step's own check of its model, it is kept as written and read from the working
    directory); the file is read when a count is first needed (TOKENIZER_UNAVAILABLE then).
    """
    from runtime.context.tokens import ENCODINGS

    if not isinstance(value, str) or not value.strip():
        raise _invalid(where, "tokenizer must be a non-empty string")
    if value == "server":
        if provider != "openai":
            raise _invalid(
                where, f"tokenizer server counts on an openai model's server, not {provider}"
            )
        return value
    if value.startswith("hf:"):
        path = Path(value[len("hf:") :].strip())
        if not path.name:
            raise _invalid(where, "tokenizer hf: needs the path of a tokenizer.json")
        if not path.is_absolute():
            if not base_dir:
                return f"hf:{path}"
            path = Path(base_dir) / path
        path = path.absolute()
        if not path.is_file():
            raise _invalid(where, f"tokenizer {value}: no such file ({path})")
        return f"hf:{path}"
    if value not in ENCODINGS:
        raise _invalid(
            where,
            f"tokenizer must be {', '.join(ENCODINGS)}, server or hf:PATH (a tokenizer.json), "
            f"not {value!r}",
        )
    return value


def check_margin(value: Any, where: str) -> float:
    """token_margin: a fraction 0..1 of the count kept free."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value <= 1:
        raise _invalid(where, f"token_margin must be a fraction from 0 to 1, not {value!r}")
    return float(value)


def _adhoc_counting(where: str, spec_dir: str | None) -> dict[str, Any]:
    """The tokenizer and margin $RUNTIME_TOKENIZER and $RUNTIME_TOKEN_MARGIN set, if any."""
    out: dict[str, Any] = {}
    tokenizer = environment().get(TOKENIZER_ENV)
    if tokenizer is not None:
        out["tokenizer"] = check_tokenizer(
            tokenizer, "openai", f"${TOKENIZER_ENV}", spec_dir or os.getcwd()
        )
    margin = environment().get(TOKEN_MARGIN_ENV)
    if margin is not None:
        try:
            value: Any = float(margin)
        except ValueError:
            value = margin
        out["token_margin"] = check_margin(value, f"${TOKEN_MARGIN_ENV} ({where})")
    return out


# Resolution reads the environment only through environment(), so a resumed run can resolve
# its models with the values its start recorded (runtime/engine/choices.py).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("model_environ", default=None)


def environment() -> Mapping[str, str]:
    """The environment model specs resolve against: os.environ unless `resolving_with` says."""
    environ = _ENVIRON.get()
    return os.environ if environ is None else environ


@contextmanager
def resolving_with(environ: Mapping[str, str]) -> Iterator[None]:
    """Resolve specs against environ within the block (this thread or task only)."""
    token = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


def _default_base_url() -> str:
    return environment().get(BASE_URL_ENV) or DEFAULT_BASE_URL


def _adhoc_window(where: str) -> int:
    raw = environment().get(CONTEXT_WINDOW_ENV)
    if raw is None:
        return DEFAULT_CONTEXT_WINDOW
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise _invalid(where, f"${CONTEXT_WINDOW_ENV} must be a positive integer, not {raw!r}")
    return value


def _adhoc_deadline(where: str) -> float:
    """deadline_seconds from $RUNTIME_DEADLINE_SECONDS (the default when unset)."""
    raw = environment().get(DEADLINE_ENV)
    if raw is None:
        return DEFAULT_DEADLINE
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    return _positive_number(value, f"${DEADLINE_ENV}", where)


def config_from_spec(
    spec: str,
    settings: Mapping[str, Any],
    *,
    base_dir: str | None = None,
    spec_dir: str | None = None,
) -> ModelConfig:
    """The configuration a spec string or settings name stands for.

    A relative `replay:FILE` resolves against spec_dir (None: the working directory);
    a relative `cassette` of a settings entry against base_dir (the pipeline's folder).
    """
    if not isinstance(spec, str):
        raise _invalid("model", f"a model spec must be a string, not {spec!r}")
    models = settings.get("models")
    if models is None:
        models = {}
    if not isinstance(models, Mapping):
        raise _invalid("settings.models", "must be a mapping of names to model entries")
    if spec in models:
        return config_from_settings(spec, models[spec], base_dir=base_dir)
    where = f"model spec {spec!r}"
    if spec == "extractive":
        return ModelConfig(
            "extractive", "extractive", model="extractive", context_window=EXTRACTIVE_CONTEXT_WINDOW
        )
    if spec == "scripted":
        return ModelConfig(
            "scripted", "scripted", model="scripted", context_window=EXTRACTIVE_CONTEXT_WINDOW
        )
    kind, colon, rest = spec.partition(":")
    if colon and kind == "scripted" and rest.strip():
        path = Path(rest)
        if not path.is_absolute() and spec_dir:
            path = Path(spec_dir) / path
        if not path.is_file():
            raise _invalid(where, f"no script file {str(path)!r}")
        return ModelConfig(
            spec,
            "scripted",
            model="scripted",
            cassette=str(path),
            context_window=EXTRACTIVE_CONTEXT_WINDOW,
        )
    if colon and kind == "replay" and rest.strip():
        path = Path(rest)
        if not path.is_absolute() and spec_dir:
            path = Path(spec_dir) / path
        from runtime.models.cassette import recorded_profile

        # The recording model's window and tokenizer, so the replay budgets as the live run
        # did; cassettes recorded before these were kept get the replay window.
        profile: dict[str, Any] = {"context_window": REPLAY_CONTEXT_WINDOW}
        profile.update(recorded_profile(path))
        # $RUNTIME_TOKENIZER replays with another tokenizer (a `server` one needs the server).
        counting = _adhoc_counting(where, spec_dir)
        if counting.get("tokenizer") == "server":
            raise _invalid(f"${TOKENIZER_ENV}", "tokenizer server needs an openai model")
        profile.update(counting)
        return ModelConfig(spec, "replay", model="replay", cassette=str(path), **profile)
    if colon and kind == "openai":
        model, at, url = rest.partition("@")
        if not model.strip() or (at and not url):
            raise _invalid(where, "use openai:MODEL or openai:MODEL@BASE_URL")
        base = url or _default_base_url()
        return ModelConfig(
            spec,
            "openai",
            model=model,
            # Named without the URL: a refused URL may hold a credential.
            base_url=check_base_url(base, f"model spec 'openai:{model}@...'"),
            context_window=_adhoc_window(where),
            **_adhoc_counting(where, spec_dir),
            # A slow local server (a small CPU, a long answer) needs more than the default.
            deadline_seconds=_adhoc_deadline(where),
        )
    if colon or not spec.strip() or spec != spec.strip():
        raise _invalid(
            where,
            "use extractive, replay:FILE, openai:MODEL, openai:MODEL@BASE_URL "
            "or a name from settings.models",
        )
    near = difflib.get_close_matches(spec, [*map(str, models), "extractive"], n=1)
    raise ModelError(
        f"unknown model {spec!r}: not in settings.models "
        f"({', '.join(sorted(map(str, models))) or 'none defined'})"
        + (f"; did you mean {near[0]!r}?" if near else ""),
        code="MODEL_UNKNOWN",
    )


def check_settings(settings: Mapping[str, Any], *, base_dir: str | None = None) -> list[ModelError]:
    """Every problem with settings.models and settings.default_model (for validators)."""
    problems: list[ModelError] = []
    models = settings.get("models")
    if models is not None and not isinstance(models, Mapping):
        return [_invalid("settings.models", "must be a mapping of names to model entries")]
    for name, raw in (models or {}).items():
        try:
            config_from_settings(str(name), raw, base_dir=base_dir)
        except ModelError as exc:
            problems.append(exc)
    default = settings.get("default_model")
    if default is not None:
        try:
            config_from_spec(default, settings, base_dir=base_dir, spec_dir=base_dir)
        except ModelError as exc:
            if not any(p.message == exc.message for p in problems):
                problems.append(exc)
    return problems
