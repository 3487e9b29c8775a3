"""The pipeline model: a validated pipeline as plain, immutable-by-convention data."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.format.access import mapping
from runtime.format.branches import branch_refs, ref_target, with_branch_steps
from runtime.format.compat import prompts_folder
from runtime.format.files import read_bounded
from runtime.format.transitions import target_of

if TYPE_CHECKING:
    from runtime.format.source import SourceMap

DEFAULT_MAX_STEPS = 1000
# Step fields that name a prompt file (under the pipeline's prompts folder).
PROMPT_FIELDS = ("prompt_key", "translate_prompt_key")
INPUT_TYPES = ("string", "integer", "number", "boolean", "array", "object", "any")


@dataclass(frozen=True)
class Step:
    """One step: its id, action name and full configuration mapping."""

    id: str
    action: str
    config: Mapping[str, Any]
    index: int

    @property
    def end(self) -> bool:
        """True when the step stops the run (`end: true`)."""
        return self.config.get("end") is True

    @property
    def next(self) -> str | None:
        """The default transition's step id (short or long form)."""
        return target_of(self.config.get("next"))


@dataclass(frozen=True)
class InputSpec:
    """A declared pipeline input."""

    name: str
    type: str = "any"
    required: bool = True
    default: Any = None
    has_default: bool = False
    description: str = ""
    max_length: int | None = None  # characters, for string inputs
    min_length: int | None = None  # characters, for string inputs
    pattern: str | None = None  # a regular expression a string input must match (re.search)


@dataclass
class Pipeline:
    """A loaded pipeline (after `extends` merging)."""

    name: str
    steps: tuple[Step, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    file: str | None = None
    inputs: dict[str, InputSpec] | None = None  # None: any input is accepted
    outputs: tuple[str, ...] = ()
    inbox_on_leftover: str = "warn"
    raw: dict[str, Any] = field(default_factory=dict)
    source: SourceMap | None = None

    def __post_init__(self) -> None:
        self._by_id = {s.id: s for s in self.steps}
        self._yaml_hash = hashlib.sha256(
            json.dumps(self.raw, sort_keys=True, default=str).encode()
        ).hexdigest()

    @property
    def content_hash(self) -> str:
        """What a resume compares: the pipeline and, read now, every prompt file it names.

        A prompt edited between a crash and `resume` changes it (PIPELINE_CHANGED unless
        forced). Read on each access, not cached: a Runner's later runs record the
        prompts they start with. Without prompt fields it is the pipeline's hash alone,
        as before, so runs stored by earlier versions still resume.
        """
        prompts = self.prompt_files()
        branches = self.branch_files()
        if not prompts and not branches:
            return self._yaml_hash
        digest = hashlib.sha256(self._yaml_hash.encode())
        for key, content in sorted(prompts.items()):
            digest.update(json.dumps([key, content]).encode())
        for ref, content in sorted(branches.items()):  # (absent before branch refs existed)
            digest.update(json.dumps(["pipeline", ref, content]).encode())
        return digest.hexdigest()

    def branch_files(self) -> dict[str, str]:
        """Each `pipeline:` a branch names -> the SHA-256 of its file (or why it is unread):
        an edited branch pipeline changes the hash a resume compares."""
        out: dict[str, str] = {}
        for config in with_branch_steps(step.config for step in self.steps):
            for ref in branch_refs(config).values():
                if ref not in out:
                    raw, problem = read_bounded(ref_target(ref, self.file)[0])
                    out[ref] = hashlib.sha256(raw).hexdigest() if raw is not None else str(problem)
        return out

    def prompt_files(self) -> dict[str, str | None]:
        """Each prompt key the steps name -> the SHA-256 of its file, or None when it is absent."""
        out: dict[str, str | None] = {}
        # A branch's prompt is as much the pipeline's as a top-level one: locks and resume see it.
        for config in with_branch_steps(step.config for step in self.steps):
            for field_name in PROMPT_FIELDS:
                key = config.get(field_name)
                if not isinstance(key, str) or key in out:
                    continue
                path = self.prompt_path(key)
                if path is None:
                    out[key] = None
                    continue
                raw, problem = read_bounded(str(path))  # a prompt is no way to read /dev/zero
                out[key] = hashlib.sha256(raw).hexdigest() if raw is not None else str(problem)
        return out

    @property
    def entry_step_id(self) -> str:
        """The step a run starts at."""
        return str(self.settings.get("entry_step_id") or (self.steps[0].id if self.steps else ""))

    @property
    def max_steps(self) -> int:
        """The global step limit (settings.max_steps, default 1000)."""
        value = self.settings.get("max_steps")
        if isinstance(value, bool):  # an int in Python, but `max_steps: true` is no step count
            return DEFAULT_MAX_STEPS
        return value if isinstance(value, int) and value > 0 else DEFAULT_MAX_STEPS

    @property
    def base_dir(self) -> Path:
        """The folder relative paths resolve against."""
        return Path(self.file).resolve().parent if self.file else Path.cwd()

    @property
    def prompts_dir(self) -> Path:
        """Where prompt files live: settings.prompts_dir or prompts/, found as in docs/format.md."""
        return prompts_folder(self.base_dir, self.settings.get("prompts_dir"))

    def prompt_path(self, key: str) -> Path | None:
        """The file for a prompt key (`key`, `key.md` or `key.txt`), or None when absent."""
        base = self.prompts_dir
        for candidate in (base / key, base / f"{key}.md", base / f"{key}.txt"):
            try:
                if candidate.is_file():
                    return candidate
            except OSError:  # a key no file can have (too long a name): not found
                continue
        return None

    def step(self, step_id: str) -> Step:
        """The step with this id (KeyError when absent)."""
        return self._by_id[step_id]

    def has_step(self, step_id: str) -> bool:
        """True when a step has this id."""
        return step_id in self._by_id

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, file: str | None = None, source: SourceMap | None = None
    ) -> Pipeline:
        """Build the model from a (validated) pipeline mapping."""
        steps = tuple(
            Step(id=str(s.get("id")), action=str(s.get("action")), config=dict(s), index=i)
            for i, s in enumerate(data.get("steps") or [])
            if isinstance(s, Mapping)
        )
        inputs_raw = data.get("inputs")
        inputs: dict[str, InputSpec] | None = None
        if isinstance(inputs_raw, Mapping):
            inputs = {}
            for name, spec in inputs_raw.items():
                if isinstance(spec, str):
                    spec = {"type": spec}
                spec = spec if isinstance(spec, Mapping) else {}
                has_default = "default" in spec
                inputs[str(name)] = InputSpec(
                    name=str(name),
                    type=str(spec.get("type", "any")),
                    required=bool(spec.get("required", not has_default)),
                    default=spec.get("default"),
                    has_default=has_default,
                    description=str(spec.get("description", "")),
                    max_length=spec["maxLength"]
                    if isinstance(spec.get("maxLength"), int)
                    else None,
                    min_length=spec["minLength"]
                    if isinstance(spec.get("minLength"), int)
                    else None,
                    pattern=spec["pattern"] if isinstance(spec.get("pattern"), str) else None,
                )
        inbox = mapping(data.get("inbox"))
        return cls(
            name=str(data.get("name") or (Path(file).stem if file else "pipeline")),
            description=str(data.get("description") or ""),
            steps=steps,
            settings=dict(data.get("settings") or {}),
            file=file,
            inputs=inputs,
            outputs=tuple(str(o) for o in (data.get("outputs") or [])),
            inbox_on_leftover=str(inbox.get("on_leftover", "warn")),
            raw=_plain(data),
            source=source,
        )


def _plain(value: Any) -> Any:
    """Deep-copy into plain dict/list (drops source-position subclasses)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value  # most values: no abstract-class check needed
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
