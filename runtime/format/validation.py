"""Validation in one pass: YAML, JSON Schema, graph checks; every problem positioned.

`validate_paths` backs `runtime validate`; `load_pipeline` backs `runtime exec`
and the embedding API (it raises `PipelineInvalidError` with every diagnostic).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from runtime import codes
from runtime.contract.registry import Registry, checking_with, default_registry
from runtime.errors import PipelineInvalidError, UsageError
from runtime.format import checks
from runtime.format.access import items, mapping
from runtime.format.branches import BRANCH_TYPES
from runtime.format.diagnostics import Diagnostic, sort_diagnostics
from runtime.format.extends import FileCache, resolve
from runtime.format.files import shown_path
from runtime.format.loader import BOOL_WORDS, BoolKey, PipelineDoc, gc_paused, has_pipeline_root
from runtime.format.pipeline import Pipeline
from runtime.format.source import LList, LMap, Location, PathT, SourceMap, json_path
from runtime.format.transitions import LONG_FORM_TITLE, is_long_form

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
    skipped: list[str] = field(default_factory=list)  # no pipeline root (only_pipelines)

    @property
    def errors(self) -> int:
        """Number of errors."""
        return sum(1 for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> int:
        """Number of warnings."""
        return sum(1 for d in self.diagnostics if d.severity == "warning")


class _Schema:
    """One schema: a fast yes/no check, and jsonschema (made on first need) for the errors."""

    def __init__(self, schema: dict[str, Any]) -> None:
        from runtime.format.fastcheck import compile_check

        self.schema = schema
        self.fast = compile_check(schema)
        self._slow: Any = None

    def valid(self, instance: Any) -> bool:
        """True when the instance is valid; False when jsonschema must say why (or may)."""
        return self.fast is not None and self.fast(instance)

    def errors(self, instance: Any) -> Iterator[Any]:
        """jsonschema's errors for the instance."""
        if self._slow is None:
            from jsonschema import Draft202012Validator

            self._slow = Draft202012Validator(self.schema)
        return iter(self._slow.iter_errors(instance))


class _Validators:
    """The schemas of one registry: the document's top level and one per action, made lazily.

    A pipeline pays only for the actions it uses; a valid one is never walked by
    jsonschema (see runtime/format/fastcheck.py).
    """

    def __init__(self, registry: Registry) -> None:
        from runtime.format.schema import INPUT_SCHEMA, PIPELINE_FIELDS, SETTINGS_SCHEMA

        self.registry = registry
        self.names = frozenset(registry.names())
        shallow_props = dict(PIPELINE_FIELDS)
        shallow_props["steps"] = {"type": "array", "items": {"type": "object"}}
        self.top = _Schema(
            {
                "type": "object",
                "properties": shallow_props,
                "additionalProperties": False,
                "$defs": {"settings": SETTINGS_SCHEMA, "input": INPUT_SCHEMA},
            }
        )
        self._steps: dict[str, _Schema] = {}

    def step(self, name: str) -> _Schema:
        """The schema of a registered action's steps."""
        found = self._steps.get(name)
        if found is None:
            from runtime.format.schema import action_def

            cls = self.registry.get(name)
            assert cls is not None
            found = self._steps[name] = _Schema(action_def(cls))
        return found


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
    schema: _Schema,
    instance: Any,
    prefix: PathT,
    pos: _Positioner,
    reported_keys: set[PathT],
    failed: set[PathT],
) -> Iterator[Diagnostic]:
    """Diagnostics for schema errors; the paths of the values that failed go into `failed`."""
    if schema.valid(instance):
        return
    for e in schema.errors(instance):
        path: PathT = (*prefix, *e.absolute_path)
        kind = e.validator
        if "propertyNames" in e.schema_path:
            failed.add((*path, e.instance))  # the key failed, not the mapping holding it
        elif kind not in ("required", "additionalProperties"):
            failed.add(path)  # a missing field fails no value; unknown keys are added below
        any_of_types: list[Any] = []
        if kind in ("anyOf", "oneOf") and e.context:
            from jsonschema.exceptions import best_match

            # A branch the value's type fits says more than the branches it does not fit.
            misfits = [c for c in e.context if c.validator == "type" and not c.relative_path]
            unfit = {c.relative_schema_path[0] for c in misfits}
            fitting = [c for c in e.context if c.relative_schema_path[0] not in unfit]
            if fitting:
                outer, value = path, e.instance
                e = best_match(fitting)
                path = (*prefix, *e.absolute_path)
                kind = e.validator
                if is_long_form(value) and kind != "required":
                    # A long form with a bad attribute still names its target: only the
                    # attribute fails, so the edge stays in the graph (no cascade of flow errors).
                    failed.discard(outer)
                    if kind != "additionalProperties":  # unknown keys are added below
                        failed.add(path)
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
                failed.add(kpath)
                if kpath in pos.bool_keys:
                    yield pos.diag(
                        "YAML_BOOLEAN_KEY",
                        f"unquoted key {extra!r} is a boolean in YAML 1.1 and is not a field here",
                        kpath,
                        hint=_quote_key_hint(pos.bool_keys[kpath].raw),
                        key=True,
                    )
                elif e.schema.get("title") == LONG_FORM_TITLE:
                    yield pos.diag(
                        "TRANSITION_UNKNOWN_KEY",
                        f"unknown key {extra!r} in a long-form transition "
                        f"(allowed: {', '.join(allowed)})",
                        kpath,
                        hint=checks.did_you_mean(extra, allowed),
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
            if path[-1:] in (("fidelity",), ("default_fidelity",)) and kind == "enum":
                code = "FIDELITY_UNKNOWN"  # a step's, a transition's or the pipeline default
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
    pos = _positioner(sm, bool_keys)
    out, clean, failed = _schema_pass(data, pos, registry, for_execution)
    return out + _semantic_pass(clean, failed, pos, registry, prompts=prompts, graph=graph)


def _positioner(sm: SourceMap, bool_keys: Iterable[BoolKey]) -> _Positioner:
    n = len(sm.prefix)
    return _Positioner(
        sm, [BoolKey(bk.path[n:], bk.raw, bk.loc) for bk in bool_keys if bk.path[:n] == sm.prefix]
    )


def _schema_pass(
    data: Mapping[str, Any], pos: _Positioner, registry: Registry, for_execution: bool
) -> tuple[list[Diagnostic], Mapping[str, Any], set[PathT]]:
    """The structural layer: schema errors, the data without the values that failed, their paths.

    Every later check (graph, cross-field, models, the pipeline model) sees the
    returned data, where each value is schema-valid or absent; none sees a value
    that failed here (the gate is per path, so one bad value leaves its siblings checked).
    """
    v = _validators(registry)
    out: list[Diagnostic] = []
    reported_keys: set[PathT] = set()
    failed: set[PathT] = set()
    out.extend(_schema_errors(v.top, data, (), pos, reported_keys, failed))
    if "steps" not in data:
        out.append(pos.diag("SCHEMA_MISSING_FIELD", "missing required field 'steps'", ()))
    steps = items(data.get("steps"))
    load_failures = {i.name: i for i in registry.failures()}
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
                failed.add(("steps", i, "action"))
                out.append(
                    pos.diag("SCHEMA_TYPE", "`action` must be a string", ("steps", i, "action"))
                )
            continue
        if name in load_failures:
            out.append(
                pos.diag(
                    "ACTION_LOAD_FAILED",
                    f"action {name!r} from distribution "
                    f"{load_failures[name].source!r} failed to load: {load_failures[name].error}",
                    ("steps", i, "action"),
                )
            )
            continue
        if name not in v.names:
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
        out.extend(_schema_errors(v.step(name), step, ("steps", i), pos, reported_keys, failed))
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
        failed.update(path for path, _ in _non_finite(data, ()))
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
                hint=_quote_key_hint(bk.raw),
                severity="warning",
                key=True,
            )
        )
    return out, _without(data, failed), failed


def _quote_key_hint(raw: str) -> str:
    """The YAML_BOOLEAN_KEY hint for the key as the file spells it (`"yes":`, not `"on":`)."""
    return f'Quote the key ("{raw}":) so every YAML tool reads it as a string.'


def _semantic_pass(
    data: Mapping[str, Any],
    failed: set[PathT],
    pos: _Positioner,
    registry: Registry,
    *,
    prompts: Pipeline | None,
    graph: bool,
) -> list[Diagnostic]:
    """Inputs, graph, cross-field, model and prompt checks over schema-valid values only."""
    from runtime.contract.action import ENGINE_OWNED

    out: list[Diagnostic] = []

    def emit(path: PathT, code: str, message: str, **kw: Any) -> None:
        # A finding at or under a value that failed the schema repeats that error
        # (`settings: [x]` is no mapping; that its entry_step_id is missing says nothing new).
        if not any(path[:n] in failed for n in range(len(path) + 1)):
            out.append(pos.diag(code, message, path, **kw))

    for f in checks.check_inputs(data.get("inputs"), ENGINE_OWNED):
        emit(f.path, f.code, f.message, hint=f.hint, key=f.key)
    if not graph:
        return out
    settings = mapping(data.get("settings"))
    # A step that is no mapping (already reported) keeps its index, so positions stay right.
    plain_steps = [s if isinstance(s, Mapping) else {} for s in items(data.get("steps"))]
    doubtful = frozenset(
        p[1] for p in failed if len(p) > 1 and p[0] == "steps" and isinstance(p[1], int)
    )
    # The graph checks read `steps` and `settings` whole, the model checks `settings`: none
    # runs when its input failed as a whole (`steps: 1` has no entry step to look for).
    if ("steps",) not in failed and ("settings",) not in failed:
        # One graph for the graph checks and the dataflow checks: building it is most of the cost.
        step_graph = checks.Graph.build(plain_steps, registry, doubtful)
        readers = _fidelity_readers(step_graph, settings, prompts)
        for f in chain(
            checks.run_all(plain_steps, settings, registry, doubtful, graph=step_graph),
            checks.check_fidelity_readers(step_graph, readers),
            checks.check_thread_fallback(step_graph, settings, readers),
        ):
            emit(f.path, f.code, f.message, hint=f.hint, severity=f.severity, key=f.key)
        if ("inputs",) not in failed:  # `inputs: 5`: which variables come in is unknown
            from runtime.format.dataflow import check_graph

            inputs = _declared_inputs(data.get("inputs"), failed)
            for f in check_graph(step_graph, settings, inputs):
                emit(f.path, f.code, f.message, hint=f.hint, severity=f.severity)
    if ("settings",) not in failed:
        from runtime.models import check_settings

        base = str(prompts.base_dir) if prompts is not None else None
        for exc in check_settings(settings, base_dir=base):
            emit(_model_path(exc, settings), exc.code, exc.message, hint=exc.hint)
        if settings.get("access") is not None:
            # The access engine is loaded as a run would load it: an unknown engine, Cedar
            # policies that do not parse or validate, an OPA url with credentials.
            from runtime.errors import RunError
            from runtime.governance.engines import load_engine

            try:
                load_engine(settings["access"], base or ".")
            except RunError as exc:
                emit(("settings", "access"), exc.code, exc.message, hint=exc.hint)
    if prompts is not None:
        for i, step in enumerate(plain_steps):
            # prompt_key, and the older engine's translate_prompt_key, name prompt files.
            for field in ("prompt_key", "translate_prompt_key"):
                key = step.get(field)
                if isinstance(key, str) and prompts.prompt_path(key) is None:
                    folder = prompts.prompts_dir
                    emit(
                        ("steps", i, field),
                        "PROMPT_NOT_FOUND",
                        f"prompt {key!r} not found under {shown_path(folder, prompts.file)}",
                        hint=f"create {shown_path(folder / key, prompts.file)}.md",
                    )
                elif isinstance(key, str) and field == "prompt_key":
                    for line, name in _placeholders(prompts.prompt_path(key)):
                        emit(
                            ("steps", i, field),
                            "PROMPT_FIELD_UNDECLARED",
                            f"prompt {key!r} line {line} refers to {{{name}}}: a system prompt "
                            "is sent as written and declares no field",
                            hint=f"put {{{name}}} in the template of a user part whose source "
                            f"is {name} (docs/roles.md)",
                        )
        if ("steps",) not in failed and ("settings",) not in failed:
            from runtime.format.budget import check_budgets

            base_dir = str(prompts.base_dir)
            inputs = data.get("inputs")
            for f in check_budgets(
                plain_steps, settings, registry, prompts, inputs, base_dir=base_dir
            ):
                emit(f.path, f.code, f.message, hint=f.hint, severity=f.severity)
    return out


class _NoPrompts:
    """The pipeline view of a check run without a pipeline file: no prompt file is found."""

    prompts_dir = None

    def prompt_path(self, key: str) -> None:
        return None


def _fidelity_readers(
    graph: checks.Graph, settings: Mapping[str, Any], pipeline: Pipeline | None
) -> Callable[[str], bool]:
    """Whether a step's action makes a model call that reads fidelity (its prompt envelope)."""
    view = pipeline if pipeline is not None else _NoPrompts()
    memo: dict[str, bool] = {}

    def reads(sid: str) -> bool:
        if sid not in memo:
            cls = graph.actions.get(sid)
            step = graph.steps[graph.pos[sid]]
            envelope = cls.prompt_envelope(step, settings, view) if cls is not None else None
            memo[sid] = envelope is not None and envelope.fidelity
        return memo[sid]

    return reads


def _declared_inputs(inputs: Any, failed: set[PathT]) -> dict[str, Any] | None:
    """The declared inputs by name, those whose spec failed the schema too; None: undeclared."""
    if not isinstance(inputs, Mapping):
        return None
    names = dict(inputs)
    names.update((p[1], None) for p in failed if len(p) > 1 and p[0] == "inputs")
    return names


def _without(data: Mapping[str, Any], failed: set[PathT]) -> Mapping[str, Any]:
    """`data` without the values at `failed` paths: removed from mappings, None in lists.

    Containers on the way to a removed value are copied; everything else is shared, so
    a valid pipeline costs nothing here. List items become None rather than disappear
    so that later indices, and the positions computed from them, stay right.
    """
    if not failed:
        return data
    if () in failed:
        return LMap(getattr(data, "loc", None))
    root: Any = _copy(data)
    copied = {id(root)}
    for path in sorted(failed, key=len):
        node = root
        for seg in path[:-1]:
            child = _child(node, seg)
            if not isinstance(child, Mapping | list):
                node = None
                break
            if id(child) not in copied:
                child = _copy(child)
                copied.add(id(child))
                node[seg] = child
            node = child
        if node is None:
            continue
        last = path[-1]
        if isinstance(node, dict) and last in node:
            del node[last]
        elif isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
            node[last] = None
    return root


def _child(node: Any, seg: str | int) -> Any:
    if isinstance(node, Mapping):
        return node.get(seg) if isinstance(seg, str) else None
    if isinstance(node, list) and isinstance(seg, int) and 0 <= seg < len(node):
        return node[seg]
    return None


def _copy(value: Any) -> Any:
    """A shallow copy that keeps source positions (LMap / LList) or plain types."""
    if isinstance(value, LMap):
        out = LMap(value.loc)
        out.update(value)
        out.key_locs = dict(value.key_locs)
        out.val_locs = dict(value.val_locs)
        return out
    if isinstance(value, LList):
        lst = LList(value.loc)
        lst.extend(value)
        lst.item_locs = list(value.item_locs)
        return lst
    if isinstance(value, Mapping):
        return dict(value)
    return list(value)


def _non_finite(value: Any, path: PathT) -> Iterator[tuple[PathT, float]]:
    """Paths of NaN and infinite floats (YAML `.nan`, `.inf`) anywhere in the data."""
    if not path and not _any_non_finite(value):
        return  # the common case, found without building a path for every value
    if isinstance(value, float) and not math.isfinite(value):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, (*path, i))


def _any_non_finite(root: Any) -> bool:
    stack = [root]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, float | Mapping):
            return True  # an unusual type: let the exact walk decide
    return False


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
    locked: bool | None = False,
) -> tuple[list[Diagnostic], Pipeline | None]:
    merged, problems = resolve(doc, cache)
    if any(p.severity == "error" for p in problems):
        return problems, None  # the merged pipeline would only repeat the extends problem
    _branch_steps(merged)
    sm = SourceMap(merged, doc.file, doc.prefix)
    pos = _positioner(sm, bool_keys)
    with checking_with(registry, doc.file):  # branch steps check their nested steps so
        schema_diags, clean, failed = _schema_pass(merged, pos, registry, for_execution)
        # The model, like every later check, is built from schema-valid values only.
        pipeline = Pipeline.from_dict(clean, file=doc.file, source=sm)
        # An abstract pipeline is a base for `extends`: schema-checked, not a runnable graph.
        abstract = doc.data.get("abstract") is True
        semantic = _semantic_pass(
            clean, failed, pos, registry, prompts=pipeline, graph=not abstract
        )
    diags = problems + schema_diags + semantic
    if not abstract and not any(d.severity == "error" for d in diags):
        from runtime.format import lock  # the behaviour lock: docs/lock.md

        if locked or (locked is not None and lock.is_locked(pipeline)):
            diags += lock.check(pipeline, registry)
    return diags, None if abstract else pipeline


# `type: map` / `type: parallel` steps name no action: they are the action of that name
# (actions/branches.py), located at their `type`.
def _branch_steps(merged: Any) -> None:
    steps = merged.get("steps") if isinstance(merged, LMap) else None
    if not isinstance(steps, list):
        return
    for step in steps:
        if isinstance(step, LMap) and step.get("type") in BRANCH_TYPES and "action" not in step:
            # (in place, with positions: the LMap is what the schema pass reads)
            step.put("action", step["type"], step.key_locs.get("type"), step.val_locs.get("type"))


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
    paths: Sequence[str],
    *,
    registry: Registry | None = None,
    for_execution: bool = False,
    only_pipelines: bool = False,
    locked: bool = False,
) -> Report:
    """Validate files and folders; every problem of every file in one report.

    With only_pipelines, files without a pipeline root (`has_pipeline_root`) are
    skipped and listed in `Report.skipped` instead of reported as not a pipeline.
    """
    with gc_paused():  # see gc_paused: collections during loading made validation quadratic
        return _validate_paths(paths, registry, for_execution, only_pipelines, locked)


def _validate_paths(
    paths: Sequence[str],
    registry: Registry | None,
    for_execution: bool,
    only_pipelines: bool,
    locked: bool = False,
) -> Report:
    registry = registry or default_registry()
    cache = FileCache()
    files = expand_paths(paths)
    diagnostics: list[Diagnostic] = []
    pipelines: list[Pipeline] = []
    skipped: list[str] = []
    for file in files:
        # One file or pipeline that breaks the validator must not cost the batch its report.
        try:
            yf, docs, problems = cache.get(file)
        except Exception as exc:  # turned into a coded diagnostic
            diagnostics.append(_crashed(exc, Location(file, 1, 1), "$"))
            continue
        if only_pipelines and not has_pipeline_root(yf):
            skipped.append(file)
            continue
        diagnostics.extend(problems)
        for doc in docs:
            try:
                diags, pipeline = _validate_doc(
                    doc, cache, registry, yf.bool_keys, for_execution, locked
                )
            except Exception as exc:  # turned into a coded diagnostic
                loc = doc.data.loc or Location(file, 1, 1)
                diagnostics.append(_crashed(exc, loc, json_path(doc.prefix)))
                continue
            diagnostics.extend(diags)
            if pipeline is not None:
                pipelines.append(pipeline)
    skip = set(skipped)
    checked = [f for f in files if f not in skip]
    return Report(checked, sort_diagnostics(diagnostics), pipelines, skipped)


def _crashed(exc: Exception, loc: Location, path: str) -> Diagnostic:
    """VALIDATION_CRASHED naming the exception and the innermost frame that raised it."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return Diagnostic(
        "VALIDATION_CRASHED",
        "error",
        f"validation stopped on {type(exc).__name__}: {exc}{where}",
        loc.file,
        loc.line,
        loc.column,
        path,
        codes.CODES["VALIDATION_CRASHED"].hint,
    )


def load_pipeline(
    path: str,
    *,
    name: str | None = None,
    registry: Registry | None = None,
    for_execution: bool = True,
    locked: bool | None = False,
) -> Pipeline:
    """Load and validate one pipeline (`file.yaml` or `file.yaml#name`); raise on any error.

    locked: True compares it with its lock file (docs/lock.md); False does when its settings
    say `compat_mode: locked`; None never does (`runtime lock` itself).
    """
    with gc_paused():  # as in validate_paths
        return _load_pipeline(path, name, registry, for_execution, locked)


def _load_pipeline(
    path: str,
    name: str | None,
    registry: Registry | None,
    for_execution: bool,
    locked: bool | None = False,
) -> Pipeline:
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
    diags, pipeline = _validate_doc(docs[0], cache, registry, yf.bool_keys, for_execution, locked)
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


def _placeholders(path: Any) -> list[tuple[int, str]]:
    """(line, name) of each `{name}` placeholder in a prompt file (issue 29)."""
    import re

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return []  # the run reports it; validation's budget checks name the file
    found = re.compile(r"\{\{?([A-Za-z_][A-Za-z0-9_]*)\}\}?")
    return [
        (n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) for m in found.finditer(line)
    ]
