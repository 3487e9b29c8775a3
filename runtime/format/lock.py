"""The behaviour lock: what a pipeline does, frozen in `<file>.lock.json` (docs/lock.md).

A lock holds the fully resolved pipeline (after `extends` and packs) in canonical form
and its hash; per action its behaviour version, where it comes from and its defaults;
every prompt file's hash (and a short hash per line, so a drift names the line); the
models in effect with their windows, tokenizers and vocabulary hashes; the budget and
access policies in the settings; the runtime version. `drift(old, new)` lists each
difference as a positioned `LOCK_DRIFT` diagnostic.

The older engine's lock files (`lock_version` 1: allowed step keys and defaults per
action, and `behavior_version`) are read too: their allowed keys are enforced and their
defaults compared with this runtime's, and `runtime lock --upgrade` writes the new format.

Nothing here runs a step: a lock is built from the validated pipeline, its prompt files
and the action classes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime import codes
from runtime.format.diagnostics import Diagnostic
from runtime.format.files import read_bounded

if TYPE_CHECKING:
    from runtime.contract.registry import Registry
    from runtime.format.pipeline import Pipeline
    from runtime.format.source import PathT

LOCK_VERSION = 2
LEGACY_VERSION = 1
LOCKED_MODES = ("locked", "strict")  # compat_mode values that enforce the lock
COMPAT_MODES = ("locked", "strict", "latest")
# Settings that are policies, listed on their own in the lock for the reviewer.
POLICY_SETTINGS = ("context_policy", "access", "access_policy", "redact", "exceptions")
MAX_LOCK_BYTES = 8 << 20


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 as is (what the hashes are over)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def sha256(text: str | bytes) -> str:
    """Hex SHA-256 of text (UTF-8) or bytes."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def render(lock: Mapping[str, Any]) -> str:
    """The lock file's text: indented, sorted keys, one trailing newline (diff-friendly)."""
    return json.dumps(lock, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def lock_path(pipeline_file: str, name: str | None = None) -> Path:
    """`<file>.lock.json` beside the pipeline; `<file>.<name>.lock.json` for one of a pack."""
    path = Path(pipeline_file)
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    return path.with_name(f"{stem}.{name}.lock.json" if name else f"{stem}.lock.json")


def is_locked(pipeline: Pipeline) -> bool:
    """Whether the pipeline's settings ask for its lock to be enforced."""
    return pipeline.settings.get("compat_mode") in LOCKED_MODES


def runtime_version() -> str:
    """The installed step-runtime version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("step-runtime")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


# --- building -------------------------------------------------------------------------


def build(pipeline: Pipeline, registry: Registry) -> dict[str, Any]:
    """The lock of a validated pipeline."""
    # compat_mode says whether the lock is enforced, not what the pipeline does: turning
    # it on after locking is no drift.
    resolved = _without_compat_mode(pipeline.raw)
    return {
        "lock_version": LOCK_VERSION,
        "pipeline": pipeline.name,
        "runtime": runtime_version(),
        "resolved_sha256": sha256(canonical(resolved)),
        "resolved": resolved,
        "actions": _actions(pipeline, registry),
        "prompts": _prompts(pipeline),
        "models": _models(pipeline),
        "policies": {k: pipeline.settings[k] for k in POLICY_SETTINGS if k in pipeline.settings},
        # Each file a `pipeline:` branch names, by its SHA-256: an edit there changes what
        # the pipeline does as much as an edit of the pipeline itself.
        "branch_pipelines": pipeline.branch_files(),
    }


def _without_compat_mode(raw: Mapping[str, Any]) -> dict[str, Any]:
    settings = raw.get("settings")
    if isinstance(settings, Mapping) and "compat_mode" in settings:
        return {**raw, "settings": {k: v for k, v in settings.items() if k != "compat_mode"}}
    return dict(raw)


def _actions(pipeline: Pipeline, registry: Registry) -> dict[str, Any]:
    """Per action the steps use: behaviour version, source and code defaults."""
    sources = {info.name: info.source for info in registry.infos()}
    out: dict[str, Any] = {}
    for step in pipeline.steps:
        if step.action in out:
            continue
        cls = registry.get(step.action)
        if cls is None:
            out[step.action] = {"missing": True}
            continue
        out[step.action] = {
            "behavior_version": str(getattr(cls, "behavior_version", "") or "undeclared"),
            "source": sources.get(step.action, "given"),
            "defaults": json.loads(json.dumps(dict(cls.defaults), default=str)),
        }
    return out


def _prompts(pipeline: Pipeline) -> dict[str, Any]:
    """Each prompt key -> its file (relative to the pipeline's folder), hash, line hashes."""
    out: dict[str, Any] = {}
    for key in sorted(pipeline.prompt_files()):
        path = pipeline.prompt_path(key)
        if path is None:
            out[key] = {"missing": True}
            continue
        raw, problem = read_bounded(str(path))
        if raw is None:
            out[key] = {"unreadable": str(problem)}
            continue
        lines = raw.split(b"\n")
        out[key] = {
            "path": _relative(path, pipeline.base_dir),
            "sha256": sha256(raw),
            "lines": [sha256(line)[:8] for line in lines],
        }
    return out


def _relative(path: Path, base: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), base).replace(os.sep, "/")
    except ValueError:  # another drive
        return str(path)


def _models(pipeline: Pipeline) -> dict[str, Any]:
    """Each model of settings.models: provider, model, window, tokenizer and its vocabulary."""
    from runtime.errors import StepRuntimeError
    from runtime.models.config import config_from_settings

    models = pipeline.settings.get("models")
    out: dict[str, Any] = {"default_tokenizer": _tokenizer("cl100k_base", pipeline)}
    if not isinstance(models, Mapping):
        return out
    for name, raw in sorted(models.items()):
        try:
            config = config_from_settings(str(name), raw, base_dir=str(pipeline.base_dir))
        except (StepRuntimeError, ValueError) as exc:  # validation reports it; the lock says so
            out[str(name)] = {"invalid": str(exc)}
            continue
        out[str(name)] = {
            "provider": config.provider,
            "model": config.model,
            "context_window": config.context_window,
            "token_margin": config.token_margin,
            "tokenizer": _tokenizer(config.tokenizer, pipeline),
        }
    return out


def _tokenizer(name: str, pipeline: Pipeline) -> dict[str, Any]:
    """A tokenizer and the hash of its vocabulary (a server's is not knowable offline)."""
    from runtime.context.tokens import SHA256

    if name in SHA256:
        return {"name": name, "vocabulary_sha256": SHA256[name]}
    if name.startswith("hf:"):
        path = Path(name[3:])
        if not path.is_absolute():
            path = pipeline.base_dir / path
        raw, problem = read_bounded(str(path), MAX_LOCK_BYTES * 8)
        digest = sha256(raw) if raw is not None else f"unreadable: {problem}"
        return {"name": name, "vocabulary_sha256": digest}
    return {"name": name, "vocabulary_sha256": None}


# --- reading --------------------------------------------------------------------------


class LockError(Exception):
    """A lock file that cannot be read (LOCK_INVALID)."""


def read(path: Path) -> dict[str, Any]:
    """A lock file's content (either version), or LockError saying why not."""
    raw, problem = read_bounded(str(path), MAX_LOCK_BYTES)
    if raw is None:  # problem is (code, message); the message names the file
        raise LockError(problem[1] if problem else f"{path} cannot be read")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LockError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LockError(f"{path} must hold a JSON object")
    version = data.get("lock_version")
    if version == LOCK_VERSION:
        for key in ("resolved", "actions", "prompts", "models", "policies"):
            if not isinstance(data.get(key), dict):
                raise LockError(f"{path}: '{key}' must be an object")
        if data.get("resolved_sha256") != sha256(canonical(data["resolved"])):
            # Edited by hand, or damaged: what it says it froze is not what it holds.
            raise LockError(
                f"{path}: resolved_sha256 does not match the resolved pipeline it holds"
            )
        return data
    if version == LEGACY_VERSION:
        actions = data.get("actions")
        if not isinstance(actions, dict) or not all(isinstance(v, dict) for v in actions.values()):
            raise LockError(f"{path}: 'actions' must map action names to objects")
        for name, entry in actions.items():
            keys = entry.get("allowed_keys")
            if keys is not None and not (
                isinstance(keys, list) and all(isinstance(k, str) for k in keys)
            ):
                raise LockError(f"{path}: actions.{name}.allowed_keys must be a list of names")
            if not isinstance(entry.get("defaults", {}), dict):
                raise LockError(f"{path}: actions.{name}.defaults must be an object")
        return data
    raise LockError(f"{path}: lock_version {version!r} is not {LEGACY_VERSION} or {LOCK_VERSION}")


# --- comparing ------------------------------------------------------------------------


def _diag(
    code: str, severity: str, message: str, file: str, line: int, column: int, path: str = "$"
) -> Diagnostic:
    return Diagnostic(code, severity, message, file, line, column, path, codes.CODES[code].hint)


def _short(value: Any, limit: int = 80) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = canonical(value) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_path(path: PathT) -> str:
    out = "$"
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
    return out


def check(pipeline: Pipeline, registry: Registry, path: Path | None = None) -> list[Diagnostic]:
    """The lock diagnostics of a pipeline against its lock file (missing, invalid, drift)."""
    file = pipeline.file or "<pipeline>"
    where = (
        pipeline.source.locate(("settings", "compat_mode"), key=True) if pipeline.source else None
    )
    line, column = (where.line, where.column) if where is not None else (1, 1)
    target = path or lock_path(file, _pack_name(pipeline))
    if not target.exists():  # a folder there is no missing lock: read says what it is
        return [
            _diag(
                "LOCK_MISSING",
                "error",
                f"pipeline {pipeline.name!r} is locked but {target} does not exist",
                file,
                line,
                column,
            )
        ]
    try:
        old = read(target)
    except LockError as exc:
        return [_diag("LOCK_INVALID", "error", str(exc), file, line, column)]
    if old.get("lock_version") == LEGACY_VERSION:
        return list(legacy_check(pipeline, registry, old, target))
    return drift(old, build(pipeline, registry), pipeline, target)


def _pack_name(pipeline: Pipeline) -> str | None:
    """The pipeline's name when its file holds several (a pack, or YAML documents), else None."""
    from runtime.format.loader import ROOT_PACK

    prefix = pipeline.source.prefix if pipeline.source is not None else ()
    several = ROOT_PACK in prefix or any(isinstance(seg, int) for seg in prefix)
    return pipeline.name if several else None


def drift(
    old: Mapping[str, Any], new: Mapping[str, Any], pipeline: Pipeline, lock: Path
) -> list[Diagnostic]:
    """One LOCK_DRIFT per difference between a stored lock and the current one."""
    file = pipeline.file or "<pipeline>"
    out: list[Diagnostic] = []

    def at(path: PathT, message: str) -> None:
        loc = pipeline.source.locate(path) if pipeline.source else None
        out.append(
            _diag(
                "LOCK_DRIFT",
                "error",
                f"{message} (locked in {lock.name})",
                loc.file if loc else file,
                loc.line if loc else 1,
                loc.column if loc else 1,
                _json_path(path),
            )
        )

    # The pipeline itself: steps by id, then everything else by path.
    old_res, new_res = _obj(old.get("resolved")), new["resolved"]
    for diff, was, now in _differences(_by_step_id(old_res), _by_step_id(new_res)):
        located = _located_path(diff, new_res)
        if was is _ABSENT:
            at(located, f"{_describe(diff)} was added: {_short(now)}")
        elif now is _ABSENT:
            at(_parent_path(diff, new_res), f"{_describe(diff)} was removed (was {_short(was)})")
        else:
            at(located, f"{_describe(diff)} changed: {_short(was)} -> {_short(now)}")
    # Actions: behaviour version, source, defaults.
    steps = {s.action: s for s in reversed(pipeline.steps)}  # the first step using each
    old_actions = _obj(old.get("actions"))
    for name, now in sorted(new["actions"].items()):
        if name not in old_actions or old_actions[name] == now:
            continue  # an action new to the lock comes with a step: reported above
        was = _obj(old_actions[name])
        step = steps.get(name)
        where: PathT = ("steps", step.index, "action") if step else ()
        for key in sorted(set(was) | set(now)):
            if was.get(key) != now.get(key):
                what = {
                    "behavior_version": "behaviour version",
                    "source": "source",
                    "defaults": "defaults",
                }.get(key, key)
                at(
                    where,
                    f"action {name!r} {what} changed: {_short(was.get(key))} -> "
                    f"{_short(now.get(key))}"
                    + (
                        " (docs/migrating.md says what changed)"
                        if key == "behavior_version"
                        else ""
                    ),
                )
    # Prompts: named at their file and first changed line.
    base = Path(file).resolve().parent
    old_prompts = _obj(old.get("prompts"))
    for key in sorted(set(old_prompts) | set(new["prompts"])):
        was, now = old_prompts.get(key), new["prompts"].get(key)
        if was == now:
            continue
        out.append(_prompt_drift(key, was, now, base, file, lock))
    # Models, tokenizers, policies, the runtime.
    for section in ("models", "policies"):
        for path, was, now in _differences(_obj(old.get(section)), new[section]):
            settings_path: PathT = (
                ("settings", "models", *path[:1])
                if section == "models"
                else ("settings", *path[:1])
            )
            at(
                settings_path,
                f"{section}.{'.'.join(map(str, path))}: {_short(was)} -> {_short(now)}",
            )
    # Branch pipeline files (a lock written before they were locked has none to compare).
    if "branch_pipelines" in old:
        was_files, now_files = _obj(old.get("branch_pipelines")), new["branch_pipelines"]
        for ref in sorted(set(was_files) | set(now_files)):
            if was_files.get(ref) != now_files.get(ref):
                what = (
                    "was added"
                    if ref not in was_files
                    else "is no longer named"
                    if ref not in now_files
                    else f"changed: sha256 {_short(was_files[ref])[:12]} -> "
                    f"{_short(now_files[ref])[:12]}"
                )
                at(_branch_ref_path(pipeline, ref), f"branch pipeline {ref!r} {what}")
    if old.get("pipeline") != new["pipeline"]:
        at(("name",), f"pipeline name {_short(old.get('pipeline'))} -> {_short(new['pipeline'])}")
    if old.get("runtime") != new["runtime"]:
        at((), f"runtime version {old.get('runtime')} -> {new['runtime']}")
    return out


def _branch_ref_path(pipeline: Pipeline, ref: str) -> PathT:
    """Where a top-level step names `ref` as a branch pipeline (its `pipeline:`), else the
    step whose nested branches do, else the pipeline."""
    from runtime.format.branches import branch_refs, with_branch_steps

    for step in pipeline.steps:
        own = branch_refs(step.config)
        for name, named in own.items():
            if named == ref:
                if isinstance(step.config.get("pipeline"), str):
                    return ("steps", step.index, "pipeline")
                return ("steps", step.index, "branches", name, "pipeline")
        if any(ref in branch_refs(c).values() for c in with_branch_steps([step.config])):
            return ("steps", step.index)
    return ()


def _prompt_drift(key: str, was: Any, now: Any, base: Path, file: str, lock: Path) -> Diagnostic:
    """LOCK_DRIFT at the prompt file's first changed line (the pipeline when it is gone)."""
    if not isinstance(now, Mapping) or "path" not in now:
        return _diag(
            "LOCK_DRIFT",
            "error",
            f"prompt {key!r} is missing or unreadable now (locked in {lock.name})",
            file,
            1,
            1,
        )
    shown = os.path.relpath(base / now["path"]) if not os.path.isabs(now["path"]) else now["path"]
    if not isinstance(was, Mapping) or "sha256" not in was:
        return _diag(
            "LOCK_DRIFT", "error", f"prompt {key!r} is new (locked in {lock.name})", shown, 1, 1
        )
    lines = was.get("lines")
    old_lines, new_lines = (lines if isinstance(lines, list) else []), list(now["lines"])
    line = next(
        (i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)) if a != b),
        min(len(old_lines), len(new_lines)) + 1,
    )
    return _diag(
        "LOCK_DRIFT",
        "error",
        f"prompt {key!r} changed at line {line} (sha256 {str(was['sha256'])[:12]} -> "
        f"{now['sha256'][:12]}; {len(old_lines)} -> {len(new_lines)} lines; locked in {lock.name})",
        shown,
        min(line, max(len(new_lines), 1)),
        1,
    )


_ABSENT: Any = object()


def _obj(value: Any) -> Mapping[str, Any]:
    """value when it is an object, else an empty one (a damaged lock then differs)."""
    return value if isinstance(value, Mapping) else {}


def _by_step_id(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved pipeline with its steps keyed by id (an insertion is one difference)."""
    out = dict(resolved)
    steps = resolved.get("steps")
    if isinstance(steps, list):
        out["steps"] = {
            str(s.get("id")) if isinstance(s, Mapping) else f"#{i}": s for i, s in enumerate(steps)
        }
        out["step order"] = [
            str(s.get("id")) if isinstance(s, Mapping) else f"#{i}" for i, s in enumerate(steps)
        ]
    return out


def _differences(old: Any, new: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, Any, Any]]:
    """(path, old, new) for every leaf that differs; a missing side is _ABSENT."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in list(old) + [k for k in new if k not in old]:
            yield from _differences(old.get(key, _ABSENT), new.get(key, _ABSENT), (*path, key))
        return
    if old != new:
        yield path, old, new


def _describe(path: tuple[Any, ...]) -> str:
    if len(path) >= 2 and path[0] == "steps":
        rest = ".".join(map(str, path[2:]))
        return f"step {path[1]!r}" + (f" field {rest}" if rest else "")
    if path and path[0] == "step order":
        return "the order of the steps"
    return ".".join(map(str, path))


def _located_path(path: tuple[Any, ...], resolved: Mapping[str, Any]) -> PathT:
    """A difference's path in the pipeline's source (a step id back to its index)."""
    if path and path[0] == "step order":
        return ("steps",)
    if len(path) >= 2 and path[0] == "steps":
        ids = [s.get("id") if isinstance(s, Mapping) else None for s in resolved.get("steps") or []]
        if path[1] in ids:
            return ("steps", ids.index(path[1]), *path[2:])
        return ("steps",)
    return path


def _parent_path(path: tuple[Any, ...], resolved: Mapping[str, Any]) -> PathT:
    return _located_path(path[:-1], resolved) if len(path) > 1 else ()


# --- the older engine's lock files -----------------------------------------------------

# Step keys every step may hold whatever its action (the older engine's common keys).
_COMMON_KEYS = frozenset(
    {
        "id",
        "action",
        "next",
        "end",
        "stages_visible",
        "callback_caption",
        "callback_caption_translated",
    }
)


def legacy_check(
    pipeline: Pipeline, registry: Registry, old: Mapping[str, Any], lock: Path
) -> Iterator[Diagnostic]:
    """An older engine's lock (lock_version 1): allowed keys enforced, defaults compared,
    behavior_version matched; a LOCK_LEGACY warning says what was honoured."""
    file = pipeline.file or "<pipeline>"
    actions = old.get("actions") or {}
    checked_keys = 0
    for step in pipeline.steps:
        entry = actions.get(step.action)
        loc = pipeline.source.locate(("steps", step.index)) if pipeline.source else None
        if entry is None:
            yield _diag(
                "LOCK_DRIFT",
                "error",
                f"step {step.id!r}: action {step.action!r} is not in "
                f"{lock.name} (the older engine's lock)",
                file,
                loc.line if loc else 1,
                loc.column if loc else 1,
                f"$.steps[{step.index}].action",
            )
            continue
        allowed = entry.get("allowed_keys")
        if allowed is None:
            continue
        for key in step.config:
            checked_keys += 1
            if key not in allowed and key not in _COMMON_KEYS:
                kloc = (
                    pipeline.source.locate(("steps", step.index, key), key=True)
                    if pipeline.source
                    else None
                )
                yield _diag(
                    "LOCK_DRIFT",
                    "error",
                    f"step {step.id!r}: key {key!r} is not allowed for "
                    f"{step.action} by {lock.name} (the older engine's lock)",
                    kloc.file if kloc else file,
                    kloc.line if kloc else 1,
                    kloc.column if kloc else 1,
                    f"$.steps[{step.index}].{key}",
                )
    notes = []
    for name, entry in sorted(actions.items()):
        for key, value in sorted((entry.get("defaults") or {}).items()):
            cls = registry.get(name)
            ours = _default_of(cls, key) if cls is not None else _ABSENT
            if ours is _ABSENT:
                notes.append(f"{name}.{key}={_short(value)} (no such field here)")
            elif ours != value:
                yield _diag(
                    "LOCK_DRIFT",
                    "error",
                    f"action {name!r} default {key} is {_short(ours)} here, "
                    f"{_short(value)} in {lock.name} (the older engine's lock)",
                    file,
                    1,
                    1,
                )
            else:
                notes.append(f"{name}.{key}={_short(value)} (same here)")
    version = old.get("behavior_version")
    ours_v = pipeline.settings.get("behavior_version")
    if version is not None and ours_v is not None and str(version) != str(ours_v):
        loc = pipeline.source.locate(("settings", "behavior_version")) if pipeline.source else None
        yield _diag(
            "LOCK_DRIFT",
            "error",
            f"behavior_version {ours_v!r} differs from {version!r} in {lock.name}",
            file,
            loc.line if loc else 1,
            loc.column if loc else 1,
            "$.settings.behavior_version",
        )
    where = (
        pipeline.source.locate(("settings", "compat_mode"), key=True) if pipeline.source else None
    )
    yield _diag(
        "LOCK_LEGACY",
        "warning",
        f"{lock.name} is the older engine's lock (lock_version 1): its allowed step keys were "
        f"checked ({checked_keys} keys of {len(pipeline.steps)} steps) and its defaults "
        f"compared: {'; '.join(notes) or 'none'}; prompts, settings and models are not "
        "frozen by it (runtime lock --upgrade writes a lock that freezes them)",
        file,
        where.line if where else 1,
        where.column if where else 1,
    )


def _default_of(cls: Any, key: str) -> Any:
    """An action's default for a step key (its `defaults`, else its field's schema default)."""
    if key in cls.defaults:
        return cls.defaults[key]
    spec = cls.fields.get(key)
    if isinstance(spec, Mapping) and "default" in spec:
        return spec["default"]
    return _ABSENT
