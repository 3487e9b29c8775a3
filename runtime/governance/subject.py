"""The subject of a run: who is asking, from the run's inputs only (docs/access.md).

A subject is the `subject` input (`--subject JSON`, `--subject @file`, the embedding
API's `subject=`): `tenant`, `roles`, `clearance` (the labels it may read) and any other
`attributes`. It is never read from model output, retrieved text, inbox payloads or a
variable written during the run: actions read it from the run's inputs (`ctx.inputs`),
which no step can change, and `subject` is an engine-owned name no step may write. A run
without one is the anonymous subject: no tenant, no clearance, so it sees only
unlabelled, untenanted content.

Tenants are labels too: a node labelled `tenant:a` belongs to tenant `a`. Tenant labels
come only from `tenant`; one written in `clearance` is refused (SUBJECT_INVALID), so
naming another tenant's label cannot widen what a subject sees.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.errors import InputError

TENANT_PREFIX = "tenant:"
KEYS = ("id", "tenant", "roles", "clearance", "attributes")
MAX_BYTES = 64 * 1024  # a subject is a few attributes; a bigger one is a mistake


def tenant_label(tenant: str) -> str:
    """The label marking a resource as the tenant's."""
    return TENANT_PREFIX + tenant


def name_problem(value: Any) -> str | None:
    """Why value cannot name a repository, snapshot, label, tenant or role, else None.

    An empty or blank value must never reach a read: `""` is falsy and would mean
    "every repository". Surrounding whitespace and control characters are refused too,
    so one name has one spelling. Anything else is matched exactly, byte for byte.
    """
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value.strip():
        return "must not be empty or blank"
    if value != value.strip():
        return f"{value!r} has leading or trailing whitespace"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{value!r} holds a control character"
    return None


_name_problem = name_problem


@dataclass(frozen=True)
class Subject:
    """Who a run answers: tenant, roles, clearance labels and free attributes."""

    id: str | None = None
    tenant: str | None = None
    roles: tuple[str, ...] = ()
    clearance: tuple[str, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def anonymous(self) -> bool:
        """True for the subject of a run that named none."""
        return self == ANONYMOUS

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form (sorted lists), as recorded with the run."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "roles": sorted(self.roles),
            "clearance": sorted(self.clearance),
            "attributes": dict(self.attributes),
        }

    def digest(self) -> str:
        """A short stable hash of the subject (decision ids, cache keys)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


ANONYMOUS = Subject()


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(f"{where} must be a list of strings", code="SUBJECT_INVALID")
    out = []
    for item in value:
        problem = _name_problem(item)
        if problem:
            raise InputError(f"{where}: a value {problem}", code="SUBJECT_INVALID")
        out.append(item)
    return tuple(sorted(set(out)))


def parse_subject(value: Any, where: str = "input subject") -> Subject:
    """A Subject from its JSON form; anything else is SUBJECT_INVALID naming the field."""
    if value is None:
        return ANONYMOUS
    if not isinstance(value, Mapping):
        raise InputError(
            f"{where} must be an object with tenant, roles, clearance, attributes",
            code="SUBJECT_INVALID",
        )
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise InputError(
            f"{where} has unknown key(s) {', '.join(map(repr, unknown))}; known: "
            f"{', '.join(KEYS)} (put anything else under attributes)",
            code="SUBJECT_INVALID",
        )
    names: dict[str, str | None] = {}
    for key in ("id", "tenant"):
        raw = value.get(key)
        if raw is not None:
            problem = _name_problem(raw)
            if problem:
                raise InputError(f"{where}.{key} {problem}", code="SUBJECT_INVALID")
        names[key] = raw
    clearance = _strings(value.get("clearance"), f"{where}.clearance")
    tenants = [c for c in clearance if c.startswith(TENANT_PREFIX)]
    if tenants:
        # A tenant comes only from `tenant`: a tenant label in clearance would let a
        # subject of tenant a read tenant b by naming b's label.
        raise InputError(
            f"{where}.clearance names tenant label(s) {', '.join(map(repr, tenants))}; "
            "a subject's tenant is its `tenant` field",
            code="SUBJECT_INVALID",
        )
    attributes = value.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise InputError(f"{where}.attributes must be an object", code="SUBJECT_INVALID")
    try:
        text = json.dumps(attributes, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}.attributes is not JSON: {exc}", code="SUBJECT_INVALID") from exc
    if len(text) > MAX_BYTES:
        raise InputError(
            f"{where}.attributes holds {len(text)} characters, over {MAX_BYTES}",
            code="SUBJECT_INVALID",
        )
    return Subject(
        id=names["id"],
        tenant=names["tenant"],
        roles=_strings(value.get("roles"), f"{where}.roles"),
        clearance=clearance,
        attributes=json.loads(text),
    )


def read_subject_option(text: str) -> dict[str, Any]:
    """`--subject` on the command line: JSON, or `@file` holding JSON (or YAML)."""
    source = "--subject"
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"--subject file {path}"
        try:
            if path.stat().st_size > MAX_BYTES:
                raise InputError(f"{source} is over {MAX_BYTES} bytes", code="SUBJECT_INVALID")
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {source}: {exc}", code="SUBJECT_INVALID") from exc
        if path.suffix in (".yaml", ".yml"):
            import yaml

            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise InputError(f"{source} is not YAML: {exc}", code="SUBJECT_INVALID") from exc
            parse_subject(value, source)
            return dict(value) if isinstance(value, Mapping) else value
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{source} is not JSON: {exc}", code="SUBJECT_INVALID") from exc
    parse_subject(value, source)
    return dict(value) if isinstance(value, Mapping) else value


def subject_of(inputs: Mapping[str, Any]) -> Subject:
    """The subject a run's inputs name (anonymous when none)."""
    return parse_subject(inputs.get("subject"))
