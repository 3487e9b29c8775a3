"""Governed exceptions: a declared, owned, expiring bypass of one rule for some steps.

`settings.exceptions` is a list of `{id, rule, steps, owner, expires, rollback, reason}`
(docs/access.md, "Governed exceptions"). Nothing is ever bypassed implicitly: a rule is
lifted for a step only when `active_exception(settings, rule, step_id, today)` finds an
unexpired exception naming both. `problems` is what `runtime validate` reports: each
exception a warning with its owner and expiry, an expired one an error (so `runtime exec`
refuses it before the first step), an unknown rule or step an error.

Pure: no engine, no action; `today` is passed in (a UTC date).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The rules an exception may lift (closed: an unknown rule is EXCEPTION_INVALID). Access
# rules join this table where the access policy defines them.
RULES: dict[str, str] = {
    "redaction": "redaction is off for the covered model steps: their prompts reach the "
    "model unmasked (settings.redact and the step's redact: are not applied)",
    "access_labels": "the covered steps read as a subject cleared for the exception's "
    "`labels` too (within the labels the settings pin; never a tenant): every access "
    "engine sees that clearance for their reads",
}
# Rules that take `labels` (the labels lifted); the others must not name any.
LABEL_RULES = frozenset({"access_labels"})
TENANT_PREFIX = "tenant:"  # runtime/governance/subject.py's; a tenant is never lifted

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "Governed exceptions (docs/access.md): each lifts one rule for some steps, "
    "with an owner, an expiry date and a rollback trigger.",
    "items": {
        "type": "object",
        "required": ["id", "rule", "steps", "owner", "expires", "rollback"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "pattern": _ID, "description": "Name, in the trace."},
            "rule": {"type": "string", "description": "The rule lifted (docs/access.md)."},
            "steps": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "minLength": 1},
                "description": "Ids of the steps it covers.",
            },
            "owner": {"type": "string", "minLength": 1, "description": "Who answers for it."},
            "expires": {
                "type": "string",
                "pattern": _DATE.pattern,
                "description": "Last day it holds (YYYY-MM-DD, UTC); after it, validate and "
                "exec refuse the pipeline.",
            },
            "rollback": {
                "type": "string",
                "minLength": 1,
                "description": "What ends it before its expiry (the rollback trigger).",
            },
            "reason": {"type": "string", "description": "Why it is needed."},
            "labels": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "minLength": 1},
                "description": "access_labels: the labels the covered steps may read beyond "
                "the subject's clearance (never a tenant label; within settings.allowed_labels "
                "when they pin labels).",
            },
        },
    },
}


@dataclass(frozen=True)
class GovernedException:
    """One declared exception, as written (index: its place in settings.exceptions)."""

    index: int
    id: str
    rule: str
    steps: tuple[str, ...]
    owner: str
    expires: dt.date
    rollback: str
    labels: tuple[str, ...] = ()  # access_labels: the labels lifted

    def expired(self, today: dt.date) -> bool:
        """Past its last day."""
        return today > self.expires

    def trace_data(self) -> dict[str, Any]:
        """What a trace event and ledger entry say of it: never more than the file does."""
        out: dict[str, Any] = {
            "exception": self.id,
            "rule": self.rule,
            "owner": self.owner,
            "expires": self.expires.isoformat(),
            "rollback": self.rollback,
        }
        if self.labels:
            out["labels"] = list(self.labels)
        return out


def today_utc() -> dt.date:
    """Today's date in UTC: the day expiry is judged by."""
    return dt.datetime.now(dt.UTC).date()


def _date(text: Any) -> dt.date | None:
    if not isinstance(text, str) or not _DATE.match(text):
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def declared(settings: Mapping[str, Any]) -> list[GovernedException]:
    """The well-formed exceptions of settings (validation reports the others)."""
    items = settings.get("exceptions")
    out = []
    for i, item in enumerate(items if isinstance(items, list) else ()):
        if not isinstance(item, Mapping):
            continue
        expires = _date(item.get("expires"))
        steps = item.get("steps")
        fields = (item.get("id"), item.get("rule"), item.get("owner"), item.get("rollback"))
        if (
            expires is None
            or not isinstance(steps, list)
            or not all(isinstance(f, str) for f in fields)
        ):
            continue
        ident, rule, owner, rollback = fields
        labels = _lifted_labels(item.get("labels"), settings)
        if rule in LABEL_RULES and not labels:
            continue  # lifts nothing it can name
        out.append(
            GovernedException(
                i,
                str(ident),
                str(rule),
                tuple(s for s in steps if isinstance(s, str)),
                str(owner),
                expires,
                str(rollback),
                labels,
            )
        )
    return out


def _lifted_labels(value: Any, settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The labels an exception may lift, whatever validation said: strings only, never a
    tenant label, and within settings.allowed_labels when the settings pin labels."""
    if not isinstance(value, list):
        return ()
    pins = settings.get("allowed_labels")
    out = []
    for label in value:
        if not isinstance(label, str) or not label.strip() or label.startswith(TENANT_PREFIX):
            continue
        if isinstance(pins, list) and label not in pins:
            continue
        out.append(label)
    return tuple(sorted(set(out)))


def active_exception(
    settings: Mapping[str, Any], rule: str, step_id: str, today: dt.date | None = None
) -> GovernedException | None:
    """The unexpired exception lifting `rule` for `step_id`, or None (the rule holds)."""
    day = today or today_utc()
    for exc in declared(settings):
        if exc.rule == rule and step_id in exc.steps and not exc.expired(day):
            return exc
    return None


@dataclass(frozen=True)
class Finding:
    """A validation finding: code, message, path under settings, severity."""

    code: str
    message: str
    path: tuple[str | int, ...]
    severity: str = "error"
    hint: str = ""


def _label_problems(
    item: Mapping[str, Any],
    settings: Mapping[str, Any],
    ident: Any,
    rule: Any,
    at: tuple[str | int, ...],
) -> Iterator[Finding]:
    """`labels`: required by an access rule, refused elsewhere; no tenant label, and within
    the labels settings.allowed_labels pins (an exception never widens past the pins)."""
    labels = item.get("labels")
    if rule not in LABEL_RULES:
        if labels is not None:
            yield Finding(
                "EXCEPTION_INVALID",
                f"exception {ident!r}: rule {rule!r} takes no labels",
                (*at, "labels"),
            )
        return
    if not isinstance(labels, list) or not labels:
        yield Finding(
            "EXCEPTION_INVALID",
            f"exception {ident!r}: rule {rule!r} needs `labels`, the labels it lifts",
            at,
        )
        return
    pins = settings.get("allowed_labels")
    for j, label in enumerate(labels):
        if not isinstance(label, str):
            continue  # the schema's
        if label.startswith(TENANT_PREFIX):
            yield Finding(
                "EXCEPTION_INVALID",
                f"exception {ident!r} lifts tenant label {label!r}: tenant isolation has no "
                "exception (a tenant comes only from the subject)",
                (*at, "labels", j),
            )
        elif isinstance(pins, list) and label not in pins:
            yield Finding(
                "EXCEPTION_INVALID",
                f"exception {ident!r} lifts label {label!r}, which settings.allowed_labels "
                "does not pin: the pins are a ceiling no exception widens",
                (*at, "labels", j),
            )


def problems(
    settings: Mapping[str, Any], step_ids: Sequence[str], today: dt.date
) -> Iterator[Finding]:
    """Every exception as a warning; expired, unknown rule, unknown step, bad date: errors."""
    items = settings.get("exceptions")
    if not isinstance(items, list):
        return
    known = set(step_ids)
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        at = ("settings", "exceptions", i)
        ident = item.get("id")
        if isinstance(ident, str):
            if ident in seen:
                yield Finding("EXCEPTION_INVALID", f"exception id {ident!r} twice", (*at, "id"))
            seen.add(ident)
        rule = item.get("rule")
        if isinstance(rule, str) and rule not in RULES:
            yield Finding(
                "EXCEPTION_INVALID",
                f"exception {ident!r}: unknown rule {rule!r} (one of: {', '.join(sorted(RULES))})",
                (*at, "rule"),
            )
        yield from _label_problems(item, settings, ident, rule, at)
        steps = item.get("steps")
        for j, sid in enumerate(steps if isinstance(steps, list) else ()):
            if isinstance(sid, str) and sid not in known:
                yield Finding(
                    "EXCEPTION_INVALID",
                    f"exception {ident!r} covers step {sid!r}, which the pipeline does not have",
                    (*at, "steps", j),
                )
        raw = item.get("expires")
        expires = _date(raw)
        if isinstance(raw, str) and expires is None:
            yield Finding(
                "EXCEPTION_INVALID",
                f"exception {ident!r}: expires {raw!r} is not a date (YYYY-MM-DD)",
                (*at, "expires"),
            )
        if expires is None:
            continue
        owner = item.get("owner")
        if today > expires:
            yield Finding(
                "EXCEPTION_EXPIRED",
                f"exception {ident!r} (rule {rule!r}, owner {owner!r}) expired on "
                f"{expires.isoformat()}: the rule holds again, and the pipeline does not run "
                "while the exception is declared",
                (*at, "expires"),
                hint="remove the exception, or have its owner renew it with a new expiry",
            )
        else:
            covered = ", ".join(s for s in (steps or ()) if isinstance(s, str))
            yield Finding(
                "EXCEPTION_DECLARED",
                f"exception {ident!r} lifts rule {rule!r} for step(s) {covered} until "
                f"{expires.isoformat()} (owner {owner!r})",
                at,
                severity="warning",
                hint=f"rollback trigger: {item.get('rollback')}",
            )
