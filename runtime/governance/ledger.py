"""The provenance ledger's chain: entry kinds, canonical content, SHA-256 links and the HMAC.

A run's ledger is a list of entries, appended and never rewritten. Each entry has a
`seq` (1, 2, ... within the run), a `kind` (KINDS) and a `content`: a small JSON object
naming what the entry covers, with the SHA-256 of every stored text it covers (a trace
event's JSON, a variable's value, a model call's prompt, ...). Then

    content_hash = sha256(canonical JSON of content)
    hash         = sha256(prev "\\n" kind "\\n" content_hash "\\n" seq)

where `prev` is the previous entry's hash (GENESIS for the first). A change to any covered
text changes its content hash, a change to an entry changes its hash, and a removed,
inserted or reordered entry breaks the next entry's `prev`. With a key in
`$RUNTIME_LEDGER_KEY` every entry also carries `mac = HMAC-SHA256(key, hash)`: each entry is
the chain's head when it is written, so a signed head signs the chain below it. The key is
read from the environment and never stored.

This module is the chain alone (pure functions); runtime/engine/ledger.py writes entries in
the run store's transactions and recomputes them from the stored rows (`runtime verify`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runtime.context.canonical import sorted_ascii

GENESIS = "0" * 64
KEY_ENV = "RUNTIME_LEDGER_KEY"

# kind -> what an entry of that kind covers (docs/packs.md lists the same).
KINDS: dict[str, str] = {
    "run": "the run row (pipeline, file, content hash, start time), its inputs and RUN_STARTED",
    "checkpoint": "a checkpoint: position, engine state, variables written, steps, thread "
    "messages, pointers made the run's, and the trace events written with it that have no "
    "entry of their own",
    "model_call": "a model call's trace event, with the SHA-256 of its prompt and reply",
    "tool_call": "a tool call's trace event (a model's tool call, a rehydrated slice)",
    "decision": "a budget or policy decision's trace event",
    "summary": "a summary or compaction's trace event (what went behind a pointer)",
    "end": "the end of a run: its status, output and error",
    "pack": "a context pack (one per model call)",
}

# Trace event types that get an entry of their own; every other event is covered by the
# checkpoint (or run) entry written in the same transaction.
EVENT_KINDS: dict[str, str] = {
    "MODEL_CALL": "model_call",
    "SUMMARY_MODEL_CALL": "model_call",
    "MODEL_TOOL_CALL": "tool_call",
    "REHYDRATED": "tool_call",
    "CONTEXT_BUDGET_DECISION": "decision",
    "ACCESS": "decision",  # an access policy's decisions for one read (docs/access.md)
    "CONTEXT_BUDGET_ROUND": "decision",
    "MANAGE_CONTEXT_BUDGET": "decision",
    "THREAD_COMPACTED": "summary",
    "SUMMARY_MODEL_FALLBACK": "summary",
    # issue 28: a governed exception used, and what a model step masked (counts only)
    "EXCEPTION_USED": "decision",
    "REDACTED": "decision",
}


def canonical(value: Any) -> bytes:
    """The canonical JSON of a value: sorted keys, no spaces, ASCII (the same bytes with
    or without orjson: runtime/context/canonical.py)."""
    return sorted_ascii(value)


def sha256(data: bytes | str) -> str:
    """Hex SHA-256 of bytes, or of a string's UTF-8 (lone surrogates kept as written)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def content_hash(content: Any) -> str:
    """SHA-256 of an entry's canonical content."""
    return hashlib.sha256(canonical(content)).hexdigest()


def entry_hash(prev: str, kind: str, digest: str, seq: int) -> str:
    """An entry's hash: sha256(prev || kind || content hash || seq), newline-separated."""
    return hashlib.sha256(f"{prev}\n{kind}\n{digest}\n{seq}".encode()).hexdigest()


def sign(key: bytes, digest: str) -> str:
    """HMAC-SHA256 of an entry hash."""
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def key_from_env(environ: dict[str, str] | None = None) -> bytes | None:
    """The signing key from $RUNTIME_LEDGER_KEY (UTF-8); None when unset or empty."""
    value = (os.environ if environ is None else environ).get(KEY_ENV)
    return value.encode("utf-8", "surrogateescape") if value else None


def event_content(seq: int, type_: str, step_id: str | None, data: bytes | str) -> dict[str, Any]:
    """What an entry records of one stored trace event: its row and its JSON's SHA-256."""
    return {"seq": seq, "type": type_, "step_id": step_id, "sha256": sha256(data)}


def model_call_extra(event: dict[str, Any]) -> dict[str, Any]:
    """A model call's prompt and reply hashes: of the messages sent and the reply received.

    The prompt is the canonical JSON of the event's `messages`; the reply is its
    `reply_sha256` when the event carries one (the whole reply), else the SHA-256 of the
    `reply` opening the event keeps (named `reply_opening_sha256`).
    """
    out = {"prompt_sha256": content_hash(event.get("messages"))}
    if isinstance(event.get("reply_sha256"), str):
        out["reply_sha256"] = event["reply_sha256"]
    else:
        out["reply_opening_sha256"] = sha256(str(event.get("reply", "")))
    return out


@dataclass
class Entry:
    """One stored ledger entry, as read back."""

    seq: int
    kind: str
    content: Any  # the decoded content; None when it did not decode
    content_text: bytes
    content_hash: str
    prev: str
    hash: str
    mac: str | None = None


@dataclass
class Mismatch:
    """Something stored that the ledger does not vouch for, named by the entry it breaks."""

    seq: int | None  # the entry; None: a stored row no entry covers
    kind: str | None
    covers: str  # what the entry (or row) covers, for a person
    reason: str
    code: str = "LEDGER_MISMATCH"

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "covers": self.covers,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass
class Chain:
    """What checking the links of a chain found."""

    head: str = GENESIS
    signed: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)


def check_chain(entries: Iterable[Entry], key: bytes | None, describe: Any = None) -> Chain:
    """Check the links: seq order, prev, content hash, entry hash and (with a key) the MAC.

    `describe(entry)` names what an entry covers in a mismatch (default: its kind).
    """
    chain = Chain()
    expected = 1
    for entry in entries:
        what = describe(entry) if describe else entry.kind
        if entry.seq != expected:  # named by the entry that is not where it should be
            chain.mismatches.append(
                Mismatch(
                    expected,
                    None,
                    f"entry {expected}",
                    f"is missing (the next stored entry is numbered {entry.seq!r})",
                )
            )
        expected = entry.seq + 1 if isinstance(entry.seq, int) else expected + 1
        for reason in _link_problems(entry, chain.head):
            chain.mismatches.append(Mismatch(entry.seq, entry.kind, what, reason))
        if entry.mac is not None:
            chain.signed += 1
        if key is not None:
            if entry.mac is None:
                chain.mismatches.append(
                    Mismatch(entry.seq, entry.kind, what, "unsigned", code="LEDGER_UNSIGNED")
                )
            elif not hmac.compare_digest(entry.mac, sign(key, entry.hash)):
                chain.mismatches.append(
                    Mismatch(
                        entry.seq,
                        entry.kind,
                        what,
                        f"signed with another key than ${KEY_ENV} (or its signature changed)",
                        code="LEDGER_KEY_MISMATCH",
                    )
                )
        chain.head = entry.hash
    return chain


def _link_problems(entry: Entry, prev: str) -> Iterator[str]:
    if entry.kind not in KINDS:
        yield f"unknown kind {entry.kind!r}"
    if entry.prev != prev:
        yield "its prev hash is not the previous entry's hash (an entry was removed or changed)"
    if sha256(entry.content_text) != entry.content_hash:
        yield "its content does not hash to its content hash"
    if entry_hash(entry.prev, entry.kind, entry.content_hash, entry.seq) != entry.hash:
        yield "its hash is not sha256(prev, kind, content hash, seq)"
