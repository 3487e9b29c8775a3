"""CASES.yaml: evaluation cases, loaded with positions and checked against their own schema.

A cases file is a list of cases, or a mapping with `cases:` and optionally `corpus:`
(a source tree indexed when no --index is given) and `defaults:` (distractors and
variants every case gets unless it gives its own). Problems are collected as
diagnostics naming file:line (the pipeline loader's located YAML and its positions),
all at once, never a traceback. docs/eval.md is the reference.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.errors import PipelineInvalidError

POSITIONS = ("start", "middle", "end", "shuffled")


class CasesInvalidError(PipelineInvalidError):
    """A cases file was rejected before any run; holds every diagnostic."""

    def __init__(self, diagnostics: Any) -> None:
        super().__init__(diagnostics)
        self.message = self.message.replace("pipeline invalid", "cases file invalid", 1)


_ID = {"type": "string", "minLength": 1, "maxLength": 1000}
_EVIDENCE_ITEM = {
    "description": "A node id, a path glob (holds * ? or [), or {id}, {path} or {kind, name}.",
    "oneOf": [
        _ID,
        {
            "type": "object",
            "properties": {"id": _ID},
            "required": ["id"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"path": _ID},
            "required": ["path"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"kind": _ID, "name": _ID},
            "required": ["kind", "name"],
            "additionalProperties": False,
        },
    ],
}
_DISTRACTOR = {
    "description": "A node id, a path glob, or {auto: N}: the N nodes most like the evidence.",
    "oneOf": [
        _ID,
        {
            "type": "object",
            "properties": {"auto": {"type": "integer", "minimum": 1, "maximum": 1000}},
            "required": ["auto"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"path": _ID},
            "required": ["path"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"id": _ID},
            "required": ["id"],
            "additionalProperties": False,
        },
    ],
}
_DISTRACTORS = {"type": "array", "items": _DISTRACTOR, "maxItems": 1000}
_SIZES = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
    "minItems": 1,
    "maxItems": 100,
}
_VARIANTS = {
    "type": "object",
    "description": "Context sizes (k or tokens), evidence positions and seeds; their product.",
    "properties": {
        "k": {
            **_SIZES,
            "items": {"type": "integer", "minimum": 1, "maximum": 1000},
            "description": "Evidence blocks the model is shown (at most 1,000).",
        },
        "tokens": {**_SIZES, "description": "The evidence budget in tokens."},
        "position": {
            "type": "array",
            "items": {"enum": list(POSITIONS)},
            "minItems": 1,
            "uniqueItems": True,
        },
        "seeds": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
            "minItems": 1,
            "maxItems": 100,
        },
    },
    "additionalProperties": False,
}
_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 1000}
_CASE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"},
        "question": {"type": "string", "pattern": r"\S", "maxLength": 4000},
        "inputs": {"type": "object", "description": "More run inputs (repository, ...)."},
        "language": {
            "type": "string",
            "minLength": 1,
            "description": "What the question is about, for per-language figures (default: "
            "the evidence nodes' language).",
        },
        "expect": {
            "type": "object",
            "properties": {
                "evidence": {"type": "array", "items": _EVIDENCE_ITEM, "maxItems": 1000},
                "facts": {
                    **_STRINGS,
                    "description": "Strings the answer holds (any case), or /regex/ (/regex/i).",
                },
                "answer_contains": {
                    "oneOf": [{"type": "string", "minLength": 1}, _STRINGS],
                    "description": "Every string must be in the answer (any case).",
                },
                "tools": {**_STRINGS, "description": "Tools the model must have called."},
                "max_tokens": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Most tokens (prompt and output, all calls) the run may use.",
                },
            },
            "additionalProperties": False,
        },
        "distractors": _DISTRACTORS,
        "variants": _VARIANTS,
    },
    "required": ["id", "question"],
    "additionalProperties": False,
}
_CORPUS = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "description": "Relative to this file."},
        "repository": {"type": "string", "minLength": 1},
        "snapshot": {"type": "string", "minLength": 1},
    },
    "required": ["path"],
    "additionalProperties": False,
}
_CASES = {"type": "array", "items": _CASE, "minItems": 1, "maxItems": 100_000}


def cases_schema() -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of a cases file (`runtime schema --cases`)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://step-runtime.dev/schemas/cases.schema.json",
        "title": "step-runtime evaluation cases (runtime eval)",
        "oneOf": [
            _CASES,
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "repository": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The repository the cases are about (their scope).",
                    },
                    "snapshot": {"type": "string", "minLength": 1},
                    "corpus": _CORPUS,
                    "defaults": {
                        "type": "object",
                        "properties": {
                            "distractors": _DISTRACTORS,
                            "variants": _VARIANTS,
                        },
                        "additionalProperties": False,
                    },
                    "cases": _CASES,
                },
                "required": ["cases"],
                "additionalProperties": False,
            },
        ],
    }


@dataclass(frozen=True)
class Fact:
    """A fact the answer must state: a string (any case) or a regex."""

    text: str
    pattern: re.Pattern[str] | None = None

    def found(self, answer: str) -> bool:
        """Whether the answer states it."""
        if self.pattern is not None:
            return self.pattern.search(answer) is not None
        return self.text.casefold() in answer.casefold()


@dataclass(frozen=True)
class Variant:
    """One context shape: size (k or tokens), evidence position, seed."""

    k: int | None = None
    tokens: int | None = None
    position: str | None = None
    seed: int = 0

    @property
    def id(self) -> str:
        """A stable name: `k=8 middle seed=1`, `default` when it shapes nothing."""
        parts = []
        if self.k is not None:
            parts.append(f"k={self.k}")
        if self.tokens is not None:
            parts.append(f"tokens={self.tokens}")
        if self.position is not None:
            parts.append(self.position)
        if self.seed:
            parts.append(f"seed={self.seed}")
        return " ".join(parts) or "default"

    @property
    def size(self) -> int | None:
        """The context size of the variant (k or tokens), for the context-rot curve."""
        return self.k if self.k is not None else self.tokens


@dataclass
class Case:
    """One evaluation case."""

    id: str
    question: str
    inputs: dict[str, Any] = field(default_factory=dict)
    evidence: list[Any] = field(default_factory=list)  # str id/glob, or dict forms
    facts: list[Fact] = field(default_factory=list)
    answer_contains: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    max_tokens: int | None = None
    distractors: list[Any] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=lambda: [Variant()])
    line: int = 0
    language: str | None = None

    @property
    def answers(self) -> bool:
        """Whether the case expects anything of the answer (else it is retrieval-only)."""
        return bool(self.facts or self.answer_contains or self.tools)


@dataclass
class CaseFile:
    """A loaded cases file."""

    path: str
    cases: list[Case]
    corpus: dict[str, str] | None = None
    name: str | None = None
    repository: str | None = None
    snapshot: str | None = None


def is_glob(text: str) -> bool:
    """A string with a glob character names paths, else it is a node id."""
    return any(c in text for c in "*?[")


def _fact(text: str) -> Fact:
    m = re.fullmatch(r"/(.*)/(i?)", text, re.S)
    if m is None:
        return Fact(text)
    flags = re.I if m.group(2) else 0
    return Fact(text, re.compile(m.group(1), flags))


def _variants(spec: Mapping[str, Any]) -> list[Variant]:
    sizes: list[tuple[int | None, int | None]] = [(None, None)]
    if "k" in spec:
        sizes = [(k, None) for k in spec["k"]]
    elif "tokens" in spec:
        sizes = [(None, t) for t in spec["tokens"]]
    positions = list(spec.get("position") or [None])
    seeds = list(spec.get("seeds") or [0])
    return [
        Variant(k=k, tokens=t, position=p, seed=s)
        for (k, t), p, s in itertools.product(sizes, positions, seeds)
    ]


def load_cases(path: str, text: str | None = None) -> CaseFile:
    """Load and check a cases file; every problem at once as CASES_INVALID diagnostics."""
    from runtime.format.loader import read_yaml

    yf = read_yaml(path, text)
    diags = list(yf.diagnostics)
    if not diags and len(yf.documents) != 1:
        diags.append(_diag(path, 1, 1, f"one YAML document expected, found {len(yf.documents)}"))
    if diags:
        raise CasesInvalidError(diags)
    doc = yf.documents[0]
    diags += list(_check(path, doc))
    if diags:
        raise CasesInvalidError(diags)
    return _build(path, doc)


def _diag(file: str, line: int, column: int, message: str, path: str = "$", hint: str = "") -> Any:
    from runtime.format.diagnostics import Diagnostic

    return Diagnostic("CASES_INVALID", "error", message, file, line, column, path, hint)


def _check(path: str, doc: Any) -> Iterator[Any]:
    """Schema errors, then what a schema cannot say, each at its position."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    from runtime.format.source import SourceMap, json_path

    sm = SourceMap(doc, path)
    validator = Draft202012Validator(cases_schema())
    errors = list(validator.iter_errors(doc))
    if errors:
        # The root is oneOf(list, mapping): report the branch the document is.
        root = [e for e in errors if not e.absolute_path and e.validator == "oneOf"]
        shown = []
        for e in root:
            branch = 0 if isinstance(doc, list) else 1
            shown += [c for c in e.context if c.relative_schema_path[0] == branch]
            if not shown:
                shown.append(e)
        shown += [e for e in errors if e not in root]
        seen: set[tuple[Any, ...]] = set()
        for e in shown:
            deep = best_match([e]) if e.context else e
            where = tuple(deep.absolute_path)
            key = (where, deep.message)
            if key in seen:
                continue
            seen.add(key)
            loc = sm.locate(where)
            message = deep.message
            if len(message) > 300:
                message = message[:300] + "..."
            yield _diag(path, loc.line, loc.column, message, json_path(where))
        return
    cases = doc if isinstance(doc, list) else doc["cases"]
    prefix: tuple[str | int, ...] = () if isinstance(doc, list) else ("cases",)
    ids: dict[str, int] = {}
    for i, case in enumerate(cases):
        where = (*prefix, i)
        if case["id"] in ids:
            loc = sm.locate((*where, "id"))
            yield _diag(
                path,
                loc.line,
                loc.column,
                f"case id {case['id']!r} is used twice (first at case {ids[case['id']]})",
                json_path((*where, "id")),
            )
        ids.setdefault(case["id"], i)
        for j, fact in enumerate((case.get("expect") or {}).get("facts") or ()):
            try:
                _fact(fact)
            except re.error as exc:
                fw = (*where, "expect", "facts", j)
                loc = sm.locate(fw)
                yield _diag(path, loc.line, loc.column, f"invalid regex: {exc}", json_path(fw))
        variants = case.get("variants") or {}
        if "k" in variants and "tokens" in variants:
            loc = sm.locate((*where, "variants", "tokens"), key=True)
            yield _diag(
                path,
                loc.line,
                loc.column,
                "variants: give k or tokens, not both",
                json_path((*where, "variants")),
            )
        if len(_variants(variants)) > 10_000:
            loc = sm.locate((*where, "variants"))
            yield _diag(
                path,
                loc.line,
                loc.column,
                "more than 10,000 variants in one case",
                json_path((*where, "variants")),
            )
    if isinstance(doc, Mapping) and "corpus" in doc:
        folder = Path(path).parent / doc["corpus"]["path"]
        if not folder.is_dir():
            loc = sm.locate(("corpus", "path"))
            yield _diag(
                path,
                loc.line,
                loc.column,
                f"corpus folder {str(folder)!r} does not exist",
                "$.corpus.path",
            )


def _build(path: str, doc: Any) -> CaseFile:
    from runtime.format.source import SourceMap

    sm = SourceMap(doc, path)
    mapping = doc if isinstance(doc, Mapping) else {}
    defaults = mapping.get("defaults") or {}
    cases = doc if isinstance(doc, list) else doc["cases"]
    prefix: tuple[str | int, ...] = () if isinstance(doc, list) else ("cases",)
    out = []
    for i, c in enumerate(cases):
        expect = c.get("expect") or {}
        contains = expect.get("answer_contains") or []
        out.append(
            Case(
                id=str(c["id"]),
                question=str(c["question"]),
                inputs=_plain(c.get("inputs") or {}),
                evidence=_plain(expect.get("evidence") or []),
                facts=[_fact(f) for f in expect.get("facts") or ()],
                answer_contains=[contains] if isinstance(contains, str) else list(contains),
                tools=list(expect.get("tools") or ()),
                max_tokens=expect.get("max_tokens"),
                distractors=_plain(c.get("distractors", defaults.get("distractors")) or []),
                variants=_variants(c.get("variants", defaults.get("variants")) or {}),
                line=sm.locate((*prefix, i)).line,
                language=c.get("language"),
            )
        )
    corpus = None
    if "corpus" in mapping:
        corpus = {k: str(v) for k, v in mapping["corpus"].items()}
        corpus["path"] = str((Path(path).parent / corpus["path"]).resolve())
    repository = mapping.get("repository") or (corpus or {}).get("repository")
    snapshot = mapping.get("snapshot") or (corpus or {}).get("snapshot")
    return CaseFile(path, out, corpus, mapping.get("name"), repository, snapshot)


def _plain(value: Any) -> Any:
    """Located YAML values as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
