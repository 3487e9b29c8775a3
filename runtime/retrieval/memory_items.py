"""Memories and experiences as written: validated, normalised, checksummed (pure functions).

Every writer (the `remember` and `record_experience` actions, the embedding API,
`runtime memories import`) passes its items through `memory_record` or
`experience_record` before anything is stored: a malformed item is MEMORY_INVALID and an
item without a `labels` list MEMORY_UNLABELLED, naming the item and the field, and the
store writes nothing of a batch holding one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from runtime.contract.text import invalid_text
from runtime.errors import RunError
from runtime.retrieval.node import scope_value_problem

MEMORY_TYPES = ("episodic", "procedural", "semantic")
TIERS = ("gold", "silver", "bronze", "abandoned")
OUTCOMES = ("success", "partial", "failure", "unknown")
SCOPE_KEYS = ("repository", "snapshot", "session")

# Bounds on what one item may hold: a memory is a note, not a document (a document is
# indexed as nodes). Kept well under what a context budget shows whole.
MAX_TEXT = 20_000
MAX_LABELS = 32
MAX_ID = 128
# At most a century: a larger TTL or half-life is a typo, and float seconds stay exact.
MAX_SECONDS = 100 * 365 * 86_400
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")
_CHECKSUM = re.compile(r"^sha256:[0-9a-f]{64}$")

MEMORY_FIELDS = (
    "id",
    "type",
    "text",
    "importance",
    "confidence",
    "created_at",
    "updated_at",
    "ttl_seconds",
    "expires_at",
    "half_life_days",
    "scope",
    "labels",
    "provenance",
)
EXPERIENCE_TEXT_FIELDS = (
    "goal",
    "hypothesis",
    "action",
    "prediction",
    "outcome_result",
    "surprise",
    "lesson",
)
EXPERIENCE_FIELDS = (
    "id",
    "domain",
    "strategy",
    *EXPERIENCE_TEXT_FIELDS,
    "outcome_status",
    "confidence_tier",
    "iteration_count",
    "pipeline",
    "run_id",
    "error_code",
    "note",
    "created_at",
    "labels",
)


def checksum(text: str) -> str:
    """`sha256:<hex>` of a text's UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def canonical(record: Mapping[str, Any]) -> str:
    """The one JSON spelling of a record (sorted keys, no spaces): what its digest covers."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(record: Mapping[str, Any]) -> str:
    """The row digest a store keeps beside a record (a damaged row fails it)."""
    return hashlib.sha256(canonical(record).encode()).hexdigest()


def iso(moment: datetime) -> str:
    """A moment as stored: UTC, ISO 8601, seconds, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: str) -> float:
    """Seconds since 1970 of a stored ISO moment."""
    return datetime.fromisoformat(text).timestamp()


class _Checker:
    """Collects nothing: raises the first problem, naming the item and the field."""

    def __init__(self, what: str, where: str) -> None:
        self.what = what
        self.where = where

    def fail(self, field: str, problem: str, code: str = "MEMORY_INVALID") -> RunError:
        return RunError(f"{self.where or self.what} field {field!r} {problem}", code=code)

    def text(self, item: Mapping[str, Any], field: str, *, required: bool) -> str:
        value = item.get(field)
        if value is None:
            if required:
                raise self.fail(field, "is missing")
            return ""
        if not isinstance(value, str):
            raise self.fail(field, f"must be a string, not {type(value).__name__}")
        if required and not value.strip():
            raise self.fail(field, "must not be empty or blank")
        if len(value) > MAX_TEXT:
            raise self.fail(field, f"holds {len(value)} characters, more than {MAX_TEXT}")
        bad = invalid_text(value)
        if bad:
            raise self.fail(field, f"is not valid text: {bad}")
        return value

    def name(self, item: Mapping[str, Any], field: str, *, required: bool) -> str | None:
        """A short name (domain, strategy, pipeline): a scope-like value, one spelling."""
        value = item.get(field)
        if value is None:
            if required:
                raise self.fail(field, "is missing")
            return None
        problem = scope_value_problem(value)
        if problem:
            raise self.fail(field, problem)
        if len(value) > 200:
            raise self.fail(field, f"holds {len(value)} characters, more than 200")
        bad = invalid_text(value)
        if bad:
            raise self.fail(field, f"is not valid text: {bad}")
        return str(value)

    def unit(self, item: Mapping[str, Any], field: str, default: float) -> float:
        value = item.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(field, f"must be a number from 0 to 1, not {type(value).__name__}")
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise self.fail(field, f"must be from 0 to 1, not {value!r}")
        return float(value)

    def positive(self, item: Mapping[str, Any], field: str, most: float) -> float | None:
        value = item.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(field, f"must be a positive number, not {type(value).__name__}")
        if not (math.isfinite(value) and 0 < value <= most):
            raise self.fail(field, f"must be more than 0 and at most {most:g}, not {value!r}")
        return float(value)

    def moment(self, item: Mapping[str, Any], field: str, default: str | None) -> str | None:
        value = item.get(field)
        if value is None:
            return default
        if not isinstance(value, str) or len(value) > 40:
            raise self.fail(
                field, "must be an ISO 8601 date and time, such as 2026-01-31T09:30:00Z"
            )
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise self.fail(
                field, "must be an ISO 8601 date and time, such as 2026-01-31T09:30:00Z"
            ) from None
        if parsed.tzinfo is None:
            raise self.fail(field, f"{value!r} has no time zone (add Z for UTC)")
        return iso(parsed)

    def labels(self, item: Mapping[str, Any]) -> list[str]:
        if "labels" not in item or item["labels"] is None:
            raise self.fail(
                "labels",
                "is missing: every item needs its security labels ([] for one anyone may read)",
                code="MEMORY_UNLABELLED",
            )
        value = item["labels"]
        if not isinstance(value, list):
            raise self.fail("labels", f"must be a list of strings, not {type(value).__name__}")
        if len(value) > MAX_LABELS:
            raise self.fail("labels", f"holds {len(value)} labels, more than {MAX_LABELS}")
        for label in value:
            problem = scope_value_problem(label)
            if problem:
                raise self.fail("labels", f"label {problem}")
            bad = invalid_text(label)
            if bad:
                raise self.fail("labels", f"label is not valid text: {bad}")
        return sorted(set(value))

    def item_id(self, item: Mapping[str, Any], default: Callable[[], str]) -> str:
        value = item.get("id")
        if value is None:
            return default()
        if not isinstance(value, str) or not _ID.match(value) or len(value) > MAX_ID:
            raise self.fail(
                "id",
                f"must be 1 to {MAX_ID} letters, digits and _ . : @ - (starting with a "
                "letter or digit)",
            )
        return value

    def known(self, item: Any, fields: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(item, Mapping):
            raise RunError(
                f"{self.where or self.what}: a {self.what} must be a mapping of fields, "
                f"not {type(item).__name__}",
                code="MEMORY_INVALID",
            )
        for key in item:
            if key not in fields:
                shown = key if isinstance(key, str) and len(key) <= 60 else "(a long key)"
                raise self.fail(str(shown), f"is not a {self.what} field ({', '.join(fields)})")
        return item


def memory_record(item: Any, *, now: datetime, where: str = "") -> dict[str, Any]:
    """The normalised memory a store keeps, or MEMORY_INVALID / MEMORY_UNLABELLED.

    now: the moment created_at and updated_at default to. where: the item's place in
    what the caller wrote (`memories.json item 3`), named in the error.
    """
    check = _Checker("memory", where)
    raw = check.known(item, MEMORY_FIELDS)
    kind = raw.get("type")
    if kind not in MEMORY_TYPES:
        problem = "is missing" if kind is None else f"must be one of {', '.join(MEMORY_TYPES)}"
        raise check.fail("type", problem)
    text = check.text(raw, "text", required=True)
    labels = check.labels(raw)
    created = check.moment(raw, "created_at", iso(now))
    assert created is not None
    updated = check.moment(raw, "updated_at", created)
    assert updated is not None
    if epoch(updated) < epoch(created):
        raise check.fail("updated_at", "is earlier than created_at")
    ttl = check.positive(raw, "ttl_seconds", MAX_SECONDS)
    expires = check.moment(raw, "expires_at", None)
    if ttl is not None and expires is not None:
        raise check.fail("expires_at", "and ttl_seconds are both given; give one")
    if ttl is not None:
        expires = iso(datetime.fromtimestamp(epoch(created) + ttl, UTC))
    scope_in = raw.get("scope") or {}
    if not isinstance(scope_in, Mapping):
        raise check.fail("scope", "must be a mapping of repository, snapshot, session")
    scope: dict[str, str] = {}
    for key, value in scope_in.items():
        if key not in SCOPE_KEYS:
            raise check.fail("scope", f"has an unknown key (use {', '.join(SCOPE_KEYS)})")
        wrong = scope_value_problem(value)
        if wrong:
            raise check.fail(f"scope.{key}", wrong)
        scope[str(key)] = str(value)
    provenance_in = raw.get("provenance") or {}
    if not isinstance(provenance_in, Mapping) or set(provenance_in) - {"source", "checksum"}:
        raise check.fail("provenance", "must be a mapping of source and checksum")
    source = check.name(provenance_in, "source", required=False) or "unknown"
    given = provenance_in.get("checksum")
    if given is not None and (not isinstance(given, str) or not _CHECKSUM.match(given)):
        raise check.fail("provenance.checksum", "must read sha256:<64 lowercase hex digits>")
    if given is not None and given != checksum(text):
        raise check.fail("provenance.checksum", "is not the checksum of the text")
    record: dict[str, Any] = {
        "type": kind,
        "text": text,
        "importance": check.unit(raw, "importance", 0.5),
        "confidence": check.unit(raw, "confidence", 0.5),
        "created_at": created,
        "updated_at": updated,
        "expires_at": expires,
        "half_life_days": check.positive(raw, "half_life_days", MAX_SECONDS / 86_400),
        "scope": scope,
        "labels": labels,
        "provenance": {"source": source, "checksum": checksum(text)},
    }
    record["id"] = check.item_id(
        raw, lambda: "mem-" + digest({k: record[k] for k in ("type", "text", "scope")})[:16]
    )
    return record


def experience_record(item: Any, *, now: datetime, where: str = "") -> dict[str, Any]:
    """The normalised experience a store keeps, or MEMORY_INVALID / MEMORY_UNLABELLED."""
    check = _Checker("experience", where)
    raw = check.known(item, EXPERIENCE_FIELDS)
    record: dict[str, Any] = {
        "domain": check.name(raw, "domain", required=True),
        "strategy": check.name(raw, "strategy", required=True),
        "goal": check.text(raw, "goal", required=True),
    }
    for field in EXPERIENCE_TEXT_FIELDS[1:]:
        record[field] = check.text(raw, field, required=False)
    outcome = raw.get("outcome_status")
    if outcome not in OUTCOMES:
        problem = "is missing" if outcome is None else f"must be one of {', '.join(OUTCOMES)}"
        raise check.fail("outcome_status", problem)
    record["outcome_status"] = outcome
    tier = raw.get("confidence_tier", "bronze")
    if tier not in TIERS:
        raise check.fail("confidence_tier", f"must be one of {', '.join(TIERS)}")
    record["confidence_tier"] = tier
    count = raw.get("iteration_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1_000_000:
        raise check.fail("iteration_count", "must be a whole number from 1 to 1,000,000")
    record["iteration_count"] = count
    record["pipeline"] = check.name(raw, "pipeline", required=False)
    record["run_id"] = check.name(raw, "run_id", required=False)
    record["error_code"] = check.name(raw, "error_code", required=False)
    record["note"] = check.text(raw, "note", required=False)
    record["created_at"] = check.moment(raw, "created_at", iso(now))
    record["labels"] = check.labels(raw)
    record["id"] = check.item_id(
        raw,
        lambda: (
            f"run-{record['run_id']}"
            if record["run_id"] and _ID.match(record["run_id"])
            else "exp-"
            + digest({k: record[k] for k in ("domain", "strategy", "goal", "created_at")})[:16]
        ),
    )
    return record


def experience_text(record: Mapping[str, Any]) -> str:
    """An experience as one narrative: what was tried, expected, seen and learned."""
    lines = [f"Goal: {record['goal']}"]
    for field, title in (
        ("hypothesis", "Hypothesis"),
        ("action", "Action"),
        ("prediction", "Prediction"),
    ):
        if record.get(field):
            lines.append(f"{title}: {record[field]}")
    outcome = record["outcome_status"]
    if record.get("outcome_result"):
        outcome += f": {record['outcome_result']}"
    lines.append(f"Outcome: {outcome}")
    for field, title in (("surprise", "Surprise"), ("lesson", "Lesson")):
        if record.get(field):
            lines.append(f"{title}: {record[field]}")
    return "\n".join(lines)


def axis_texts(record: Mapping[str, Any]) -> dict[str, str]:
    """What each search axis reads of an experience.

    full: the whole narrative with its domain and strategy; strategy: the strategy and
    the action taken; surprise: what surprised and what was predicted; root_cause: the
    lesson, the outcome and the error code.
    """
    return {
        "full": f"{record['domain']} {record['strategy']}\n{experience_text(record)}",
        "strategy": f"{record['strategy']}\n{record.get('action') or ''}",
        "surprise": f"{record.get('surprise') or ''}\n{record.get('prediction') or ''}",
        "root_cause": (
            f"{record.get('lesson') or ''}\n{record.get('outcome_result') or ''}\n"
            f"{record.get('error_code') or ''}"
        ),
    }
