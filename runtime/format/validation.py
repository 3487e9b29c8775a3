"""Validation in one pass: YAML, JSON Schema, graph checks; every problem positioned.

`validate_paths` backs `runtime validate`; `load_pipeline` backs `runtime exec`
and the embedding API (it raises `PipelineInvalidError` with every diagnostic).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime import codes
from runtime.contract.registry import Registry, default_registry
from runtime.errors import PipelineInvalidError, UsageError
from runtime.format import checks
from runtime.format.access import items, mapping
from runtime.format.diagnostics import Diagnostic, sort_diagnostics
from runtime.format.extends import FileCache, resolve
from runtime.format.loader import BOOL_WORDS, BoolKey, PipelineDoc
from runtime.format.pipeline import Pipeline
from runtime.format.source import LMap, Location, PathT, SourceMap, json_path

_RANGE = {
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "multipleOf",
}
_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
# Boolean-looking keys that are genuine field names of the format.
_LEGIT_BOOL_KEYS = {("retry", "on")}


@dataclass
class Report:
    """The result of validating files: every diagnostic and the pipelines that loaded."""

    files: list[str]
    diagnostics: list[Diagnostic]
    pipelines: list[Pipeline] = field(default_factory=list)

    @property
    def errors(self) -> int:
        """Number of errors."""
        return sum(1 for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> int:
        """Number of warnings."""
        return sum(1 for d in self.diagnostics if d.severity == "warning")


class _Validators:
    """Compiled JSON Schema validators for one registry."""

    def __init__(self, registry: Registry) -> None:
        from jsonschema import Draft202012Validator

        from runtime.format.schema import PIPELINE_FIELDS, action_def, document_schema

        full = document_schema(registry)
        shallow_props = dict(PIPELINE_FIELDS)
        shallow_props["steps"] = {"type": "array", "items": {"type": "object"}}
        top = {
            "type": "object",
            "properties": shallow_props,
            "additionalProperties": False,
            "$defs": full["$defs"],
        }
        self.top = Draft202012Validator(top)
        self.steps = {}
        for name in registry.names():
            cls = registry.get(name)
            assert cls is not None
            self.steps[name] = Draft202012Validator(action_def(cls))


_validator_cache: weakref.WeakKeyDictionary[Registry, _Validators] = weakref.WeakKeyDictionary()


def _validators(registry: Registry) -> _Validators:
    found = _validator_cache.get(registry)
    if found is None:
        found = _validator_cache[registry] = _Validators(registry)
    return found


class _Positioner:
    """Turns findings at paths into diagnostics at file positions."""

    def __init__(self, sm: SourceMap, bool_keys: Iterable[BoolKey]) -> None:
        self.sm = sm
        self.bool_keys = {bk.path: bk for bk in bool_keys}

    def diag(
        self,
        code: str,
        message: str,
        path: PathT,
        *,
        hint: str = "",
        severity: str = "error",
        key: bool = False,
    ) -> Diagnostic:
        loc = self.sm.locate(path, key=key)
        return Diagnostic(
            code,
            severity,
            message,
            loc.file,
            loc.line,
            loc.column,
            json_path(self.sm.full_path(path)),
            hint or codes.CODES[code].hint,
            loc.end_line,
            loc.end_column,
        )


def _field_name(path: PathT) -> str:
    for seg in reversed(path):
        if isinstance(seg, str):
            return seg
    return "value"


def _schema_errors(
    validator: Any, instance: Any, prefix: PathT, pos: _Positioner, reported_keys: set[PathT]
) -> Iterator[Diagnostic]:
    for e in validator.iter_errors(instance):
        path: PathT = (*prefix, *e.absolute_path)
        kind = e.validator
        any_of_types: list[Any] = []
        if kind in ("anyOf", "oneOf") and e.context:
            from jsonschema.exceptions import best_match

            # A branch the value's type fits says more than the branches it does not fit.
            misfits = [c for c in e.context if c.validator == "type" and not c.relative_path]
            unfit = {c.relative_schema_path[0] for c in misfits}
            fitting = [c for c in e.context if c.relative_schema_path[0] not in unfit]
            if fitting:
                e = best_match(fitting)
                path = (*prefix, *e.absolute_path)
                kind = e.validator
            else:
                any_of_types = [c.validator_value for c in misfits]
                kind = "type"
        name = _field_name(path)
        if kind == "additionalProperties" and isinstance(e.instance, Mapping):
            allowed = list(e.schema.get("properties", {}))
            for extra in e.instance:
                if extra in allowed:
                    continue
                kpath = (*path, extra)
                reported_keys.add(kpath)
                if kpath in pos.bool_keys:
                    yield pos.diag(
                        "YAML_BOOLEAN_KEY",
                        f"unquoted key {extra!r} is a boolean in YAML 1.1 and is not a field here",
                        kpath,
                        key=True,
                    )
                else:
                    yield pos.diag(
                        "SCHEMA_UNKNOWN_FIELD",
                        f"unknown field {extra!r}",
                        kpath,
                        hint=checks.did_you_mean(extra, allowed)
                        or f"allowed: {', '.join(sorted(allowed))}",
                        key=True,
                    )
        elif kind == "required" and isinstance(e.instance, Mapping):
            for missing in e.validator_value:
                if missing not in e.instance:
                    where = f" in step {e.instance.get('id')!r}" if "id" in e.instance else ""
                    yield pos.diag(
                        "SCHEMA_MISSING_FIELD", f"missing required field {missing!r}{where}", path
                    )
        elif kind == "type":
            expected = any_of_types or e.validator_value
            got = _json_type(e.instance)
            raw = pos.sm.raw(path)
            wants_str = expected == "string" or (
                isinstance(expected, list) and "string" in expected
            )
            if isinstance(e.instance, bool) and wants_str and raw and raw.lower() in BOOL_WORDS:
                yield pos.diag(
                    "YAML_BOOLEAN_VALUE",
                    f"`{name}`: unquoted {raw!r} is read as a boolean; a string is expected",
                    path,
                    hint=f"write '{raw}' in quotes",
                )
            else:
                yield pos.diag(
                    "SCHEMA_TYPE",
                    f"`{name}` must be {_a(expected)}, got {got} {_short(e.instance)}",
                    path,
                )
        elif kind in ("enum", "const"):
            choices = e.validator_value if kind == "enum" else [e.validator_value]
            hint = (
                checks.did_you_mean(e.instance, [str(c) for c in choices])
                if isinstance(e.instance, str)
                else ""
            )
            code = "UNKNOWN_ACTION" if path[-1:] == ("action",) else "SCHEMA_ENUM"
            yield pos.diag(
                code,
                f"`{name}` must be one of {', '.join(map(str, choices))}; got {_short(e.instance)}",
                path,
                hint=hint,
            )
        elif kind in _RANGE:
            yield pos.diag("SCHEMA_RANGE", f"`{name}`: {e.message}", path)
        elif kind in ("pattern", "propertyNames"):
            yield pos.diag("SCHEMA_PATTERN", f"`{name}`: {e.message}", path)
        else:
            yield pos.diag("SCHEMA_INVALID", f"`{name}`: {e.message}", path)


def _json_type(value: Any) -> str:
    """The JSON type name of a value (located values are dict and list subclasses)."""
    return next((n for t, n in _JSON_TYPES.items() if isinstance(value, t)), type(value).__name__)


def _a(expected: Any) -> str:
    if isinstance(expected, list):
        return " or ".join(_a(x) for x in expected)
    return f"an {expected}" if str(expected)[:1] in "aeiou" else f"a {expected}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_pipeline(
    data: LMap | Mapping[str, Any],
    sm: SourceMap,
    registry: Registry,
    *,
    bool_keys: Iterable[BoolKey] = (),
    for_execution: bool = False,
    prompts: Pipeline | None = None,
    graph: bool = True,
) -> list[Diagnostic]:
    """Schema, graph and semantic checks of one (merged) pipeline."""
    n = len(sm.prefix)
    pos = _Positioner(
        sm, [BoolKey(bk.path[n:], bk.raw, bk.loc) for bk in bool_keys if bk.path[:n] == sm.prefix]
    )
    v = _validators(registry)
    out: list[Diagnostic] = []
    reported_keys: set[PathT] = set()
    out.extend(_schema_errors(v.top, data, (), pos, reported_keys))
    if "steps" not in data:
        out.append(pos.diag("SCHEMA_MISSING_FIELD", "missing required field 'steps'", ()))
    steps = items(data.get("steps"))
    failed = {i.name: i for i in registry.failures()}
    for i, step in enumerate(steps):
        if not isinstance(step, Mapping):
            continue
        name = step.get("action")
        if not isinstance(name, str):
            if "action" not in step:
                out.append(
                    pos.diag(
                        "SCHEMA_MISSING_FIELD", "missing required field 'action'", ("steps", i)
                    )
                )
            else:
                out.append(
                    pos.diag("SCHEMA_TYPE", "`action` must be a string", ("steps", i, "action"))
                )
            continue
        if name in failed:
            out.append(
                pos.diag(
                    "ACTION_LOAD_FAILED",
                    f"action {name!r} from distribution "
                    f"{failed[name].source!r} failed to load: {failed[name].error}",
                    ("steps", i, "action"),
                )
            )
            continue
        if name not in v.steps:
            out.append(
                pos.diag(
                    "UNKNOWN_ACTION",
                    f"unknown action {name!r}",
                    ("steps", i, "action"),
                    hint=checks.did_you_mean(name, registry.names())
                    or "run `runtime actions` to list them",
                )
            )
            continue
        out.extend(_schema_errors(v.steps[name], step, ("steps", i), pos, reported_keys))
        cls = registry.get(name)
        if for_execution and cls is not None and not cls.runnable:
            out.append(
                pos.diag(
                    "ACTION_NOT_RUNNABLE", f"action {name!r} cannot run yet", ("steps", i, "action")
                )
            )
    # NaN and infinities are no JSON numbers: one diagnostic each replaces any schema error there.
    non_finite = [
        pos.diag(
            "SCHEMA_TYPE",
            f"`{_field_name(path)}`: {pos.sm.raw(path) or value} is not a finite number",
            path,
        )
        for path, value in _non_finite(data, ())
        if not any(path[:n] in reported_keys for n in range(1, len(path) + 1))  # unknown field
    ]
    if non_finite:
        where = {d.path for d in non_finite}
        out = [d for d in out if d.path not in where] + non_finite
    for bk_path, bk in pos.bool_keys.items():
        parent = bk_path[-2] if len(bk_path) > 1 else None
        if bk_path in reported_keys or (parent, bk.raw) in _LEGIT_BOOL_KEYS:
            continue
        out.append(
            pos.diag(
                "YAML_BOOLEAN_KEY",
                f"unquoted key {bk.raw!r} is a boolean in YAML 1.1; read here as the "
                f"string {bk.raw!r}",
                bk_path,
                severity="warning",
                key=True,
            )
        )
    from runtime.contract.action import ENGINE_OWNED

    for f in checks.check_inputs(data.get("inputs"), ENGINE_OWNED):
        out.append(pos.diag(f.code, f.message, f.path, hint=f.hint, key=f.key))
    settings = mapping(data.get("settings"))
    plain_steps = [s for s in steps if isinstance(s, Mapping)]
    if not graph:
        return out
    for f in checks.run_all(plain_steps, settings, registry):
        out.append(pos.diag(f.code, f.message, f.path, hint=f.hint, severity=f.severity, key=f.key))
    from runtime.models import check_settings

    base = str(prompts.base_dir) if prompts is not None else None
    for exc in check_settings(settings, base_dir=base):
        out.append(pos.diag(exc.code, exc.message, _model_path(exc, settings), hint=exc.hint))
    if prompts is not None:
        for i, step in enumerate(plain_steps):
            key = step.get("prompt_key")
            if isinstance(key, str) and prompts.prompt_path(key) is None:
                out.append(
                    pos.diag(
                        "PROMPT_NOT_FOUND",
                        f"prompt {key!r} not found under {prompts.prompts_dir}",
                        ("steps", i, "prompt_key"),
                        hint=f"create {prompts.prompts_dir / key}.md",
                    )
                )
    return out


def _non_finite(value: Any, path: PathT) -> Iterator[tuple[PathT, float]]:
    """Paths of NaN and infinite floats (YAML `.nan`, `.inf`) anywhere in the data."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, (*path, i))


def _model_path(exc: Any, settings: Mapping[str, Any]) -> PathT:
    """Where a settings.models / default_model problem belongs."""
    import re

    m = re.match(r"settings\.models\.([^:]+):", exc.message)
    if m and m.group(1) in mapping(settings.get("models")):
        return ("settings", "models", m.group(1))
    if "default_model" in settings and (
        exc.code == "MODEL_UNKNOWN" or "default_model" in exc.message
    ):
        return ("settings", "default_model")
    return ("settings", "models") if "models" in settings else ("settings",)


def _validate_doc(
    doc: PipelineDoc,
    cache: FileCache,
    registry: Registry,
    bool_keys: list[BoolKey],
    for_execution: bool,
) -> tuple[list[Diagnostic], Pipeline | None]:
    merged, problems = resolve(doc, cache)
    if any(p.severity == "error" for p in problems):
        return problems, None  # the merged pipeline would only repeat the extends problem
    sm = SourceMap(merged, doc.file, doc.prefix)
    pipeline = Pipeline.from_dict(merged, file=doc.file, source=sm)
    # An abstract pipeline is a base for `extends`: schema-checked, but not a runnable graph.
    abstract = doc.data.get("abstract") is True
    diags = problems + check_pipeline(
        merged,
        sm,
        registry,
        bool_keys=bool_keys,
        for_execution=for_execution,
        prompts=pipeline,
        graph=not abstract,
    )
    return diags, None if abstract else pipeline


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files named, and every *.yaml / *.yml under folders named (sorted)."""
    files: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(
                str(f)
                for f in sorted(path.rglob("*"))
                if f.suffix in (".yaml", ".yml")
                and f.is_file()
                and not any(part.startswith(".") for part in f.parts)
            )
        else:
            files.append(str(path))
    return files


def validate_paths(
    paths: Sequence[str], *, registry: Registry | None = None, for_execution: bool = False
) -> Report:
    """Validate files and folders; every problem of every file in one report."""
    registry = registry or default_registry()
    cache = FileCache()
    files = expand_paths(paths)
    diagnostics: list[Diagnostic] = []
    pipelines: list[Pipeline] = []
    for file in files:
        yf, docs, problems = cache.get(file)
        diagnostics.extend(problems)
        for doc in docs:
            diags, pipeline = _validate_doc(doc, cache, registry, yf.bool_keys, for_execution)
            diagnostics.extend(diags)
            if pipeline is not None:
                pipelines.append(pipeline)
    return Report(files, sort_diagnostics(diagnostics), pipelines)


def load_pipeline(
    path: str,
    *,
    name: str | None = None,
    registry: Registry | None = None,
    for_execution: bool = True,
) -> Pipeline:
    """Load and validate one pipeline (`file.yaml` or `file.yaml#name`); raise on any error."""
    if name is None and "#" in path and not Path(path).exists():
        path, _, name = path.partition("#")
    registry = registry or default_registry()
    cache = FileCache()
    yf, docs, problems = cache.get(path)
    if problems and any(d.severity == "error" for d in problems):
        raise PipelineInvalidError(sort_diagnostics(problems))
    if name is not None:
        docs = [d for d in docs if d.name == name]
        if not docs:
            raise UsageError(f"{path} has no pipeline named {name!r}")
    elif len(docs) > 1:
        names = ", ".join(d.name for d in docs)
        raise UsageError(f"{path} holds several pipelines ({names}); choose one with {path}#NAME")
    if not docs:
        loc = Location(path, 1, 1)
        raise PipelineInvalidError(
            [Diagnostic("YAML_NOT_A_PIPELINE", "error", "no pipeline in file", loc.file, 1, 1)]
        )
    diags, pipeline = _validate_doc(docs[0], cache, registry, yf.bool_keys, for_execution)
    diags = sort_diagnostics(problems + diags)
    if pipeline is None or any(d.severity == "error" for d in diags):
        raise PipelineInvalidError(
            diags
            or [
                Diagnostic(
                    "YAML_NOT_A_PIPELINE", "error", "abstract pipelines cannot run", path, 1, 1
                )
            ]
        )
    pipeline.warnings = [d for d in diags if d.severity == "warning"]  # type: ignore[attr-defined]
    return pipeline
