"""The choices a run is started with besides its pipeline, and how a resume holds to them.

The store keeps the pipeline's content hash; what else shapes a run is recorded here
when it starts: the `--model` spec, what each model the run can call resolves to (the
environment takes part: `$OPENAI_BASE_URL`, `$RUNTIME_CONTEXT_WINDOW`, ...), the node
index (an absolute path) and the tokenizer. The record path (`--record`) is not a choice
of the run: a resume records only when asked. Durability is kept on the run row.

A resume takes every choice it is not given again from the record (an environment
variable that is unset now reads its recorded value), and refuses one given differently
(`RESUME_CHOICE_CHANGED`, naming what was recorded and what was given) unless forced.
A run started before choices were recorded resumes with what is given; the engine says
so in its trace.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.engine.services import Services
from runtime.errors import StepRuntimeError, UsageError
from runtime.net.secrets import url_credentials

DEFAULT_INDEX = ".runtime/index.db"
# The parts of a model's configuration a run records (the rest comes from the pipeline).
_MODEL_FIELDS = ("provider", "model", "base_url", "context_window", "tokenizer", "token_margin")


def model_names(pipeline: Any) -> list[str | None]:
    """The model names a pipeline's steps can ask for: None (the main model), steps' `model:`,
    settings that name a model (`*_model`, such as translator_model) and every entry of
    settings.models (an action may name one in its own fields: `summary_kind: model:NAME`)."""
    names: dict[str | None, None] = {None: None}
    models = pipeline.settings.get("models")
    if isinstance(models, Mapping):
        names.update(dict.fromkeys(str(name) for name in models))
    for step in pipeline.steps:
        name = step.config.get("model")
        if isinstance(name, str):
            names[name] = None
    for key, value in pipeline.settings.items():
        if key.endswith("_model") and key != "default_model" and isinstance(value, str):
            names[value] = None
    return list(names)


class _Reading(Mapping[str, str]):
    """An environment that remembers the variables resolution read and found set."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.read: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        value = self.environ[name]
        self.read[name] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.environ)

    def __len__(self) -> int:
        return len(self.environ)


class _Recorded(Mapping[str, str]):
    """The environment now, with recorded values for the variables unset now."""

    def __init__(self, now: Mapping[str, str], recorded: Mapping[str, str]) -> None:
        self.now, self.recorded = now, recorded

    def __getitem__(self, name: str) -> str:
        if name in self.now:
            return self.now[name]
        return self.recorded[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self.recorded, **dict.fromkeys(self.now)})

    def __len__(self) -> int:
        return len(set(self.recorded) | set(self.now))


def _summary(config: Any) -> dict[str, Any]:
    out = {f: getattr(config, f, None) for f in _MODEL_FIELDS}
    if config.cassette:
        out["cassette"] = os.path.abspath(config.cassette)
    return {k: v for k, v in out.items() if v not in (None, "", 0, 0.0)}


def _models(services: Services, names: Iterable[str | None]) -> dict[str, dict[str, Any]]:
    """What each model the run can call resolves to, keyed by the spec it stands for."""
    from runtime.models import resolve_config, spec_for

    given = services.model_provider
    out: dict[str, dict[str, Any]] = {}
    for name in [None] if services.model_spec else names:
        if given is not None and (name is None or services.model_spec):
            out["(given)"] = {"provider": "given", "class": type(given).__qualname__}
            continue
        key = services.model_spec or spec_for(name, services.settings)
        try:
            config = resolve_config(
                name,
                settings=services.settings,
                cli_spec=services.model_spec,
                base_dir=services.base_dir,
            )
        except StepRuntimeError as exc:  # the step that calls it fails with this code
            out[key] = {"error": exc.code}
            continue
        out[key] = _summary(config)
    return out


def main_model(services: Services) -> str:
    """The spec a call without a model name goes to: --model, else the pipeline's default."""
    from runtime.models import spec_for

    if services.model_spec:
        return services.model_spec
    if services.model_provider is not None:
        return "(given)"
    return spec_for(None, services.settings)


def _index(services: Services) -> str | None:
    given = services.given_node_store
    if given is not None:
        path = getattr(given, "path", None)
        return os.path.abspath(path) if isinstance(path, str) else None
    # nodestore.default_path(), without importing the node store (~0.1 s) into every run:
    # tests/runtime/test_resume_choices_api.py holds the two together.
    default = os.environ.get("RUNTIME_INDEX") or DEFAULT_INDEX
    where = services.index_path or default
    if where.startswith(("postgresql://", "postgres://")):  # the URL without its password
        from runtime.engine.pgstore import display

        return display(where)
    return os.path.abspath(where)


def _tokenizer(services: Services) -> str:
    counter = services.given_token_counter
    if counter is not None:
        return str(getattr(counter, "encoding_name", type(counter).__qualname__))
    return str(services.settings.get("tokenizer") or "cl100k_base")


def record(services: Services, names: Iterable[str | None]) -> dict[str, Any]:
    """The choices a run started with these services makes."""
    from runtime.models.config import resolving_with

    environ = _Reading(os.environ if services.environ is None else services.environ)
    with resolving_with(environ):
        models = _models(services, names)
    return {
        "model": services.model_spec,
        "main": main_model(services),
        "models": models,
        # A value holding a credential is left out (its model's entry says it was refused).
        "env": {k: v for k, v in sorted(environ.read.items()) if url_credentials(v) is None},
        "index": _index(services),
        "tokenizer": _tokenizer(services),
    }


@dataclass
class Resumed:
    """What a resume runs with: its services and choices, and the choices forced to change."""

    services: Services
    choices: dict[str, Any]
    changed: list[dict[str, Any]] = field(default_factory=list)
    recorded: bool = True  # False: the run was started before choices were recorded


def _shown(value: Any) -> str:
    return "none" if value is None else repr(value)


def reconcile(
    run_id: str,
    recorded: Mapping[str, Any] | None,
    services: Services,
    names: Iterable[str | None],
    *,
    force: bool,
) -> Resumed:
    """The services a resumed run uses: the recorded choices, or the given ones when forced.

    Raises RESUME_CHOICE_CHANGED (a usage error) when a choice is given differently
    from the record and force is not set.
    """
    names = list(names)
    if recorded is None:
        return Resumed(services, record(services, names), recorded=False)
    changed: list[dict[str, Any]] = []
    shown: list[str] = []

    def differs(what: str, was: Any, given: Any, was_text: str | None = None) -> None:
        changed.append({"what": what, "recorded": was, "given": given})
        shown.append(f"{what}: recorded {was_text or _shown(was)}, given {_shown(given)}")

    spec = recorded.get("model")
    if services.model_spec is not None and services.model_spec != spec:
        was = f"none (the pipeline's {recorded.get('main')!r})" if spec is None else None
        differs("--model", spec, services.model_spec, was)
    index = _given_index(services)
    if index is not None and index != recorded.get("index"):
        differs("--index", recorded.get("index"), index)
    env_now = os.environ if services.environ is None else services.environ
    resumed = services.derive(
        model_spec=services.model_spec if services.model_spec is not None else spec,
        index_path=services.index_path if index is not None else recorded.get("index"),
        environ=_Recorded(env_now, recorded.get("env") or {}),
    )
    now = record(resumed, names)
    was_models = recorded.get("models") or {}
    for key, model in now["models"].items():
        before = was_models.get(key)
        if before is None or "error" in before or "error" in model:
            continue
        for f in sorted(set(before) | set(model)):
            if before.get(f) != model.get(f):
                differs(f"model {key!r} {f}", before.get(f), model.get(f))
    if now["tokenizer"] != recorded.get("tokenizer"):
        differs("tokenizer", recorded.get("tokenizer"), now["tokenizer"])
    if changed and not force:
        env = recorded.get("env") or {}
        moved = sorted(n for n in {*env, *now["env"]} if n in env_now and env_now[n] != env.get(n))
        because = (
            f" ({', '.join('$' + n for n in moved)} set differently from when it started)"
            if moved
            else ""
        )
        raise UsageError(
            f"run {run_id} was started with other choices than this resume gives"
            f"{because}: {'; '.join(shown)}",
            code="RESUME_CHOICE_CHANGED",
        )
    return Resumed(resumed, now, changed)


def _given_index(services: Services) -> str | None:
    """The index this resume names: --index, $RUNTIME_INDEX or a given store; None: none."""
    if services.given_node_store is not None or services.index_path:
        return _index(services)
    env = os.environ.get("RUNTIME_INDEX")
    return os.path.abspath(env) if env else None


def warning(run_id: str, resumed: Resumed) -> str | None:
    """The line a resume prints when it did not hold to a record, else None."""
    if not resumed.recorded:
        c = resumed.choices
        return (
            f"run {run_id} was started before runs recorded their choices; resumed with "
            f"the ones given now: model {c['main']!r}, index {c['index']!r}, "
            f"tokenizer {c['tokenizer']!r}"
        )
    if resumed.changed:
        what = "; ".join(
            f"{c['what']}: recorded {_shown(c['recorded'])}, given {_shown(c['given'])}"
            for c in resumed.changed
        )
        return f"resumed with --force on choices other than the run's: {what}"
    return None
