"""The provenance ledger in the run store: its table, appending, and `runtime verify`.

The chain itself (kinds, hashes, HMAC) is runtime/governance/ledger.py. Here entries are
built from the rows the store writes and appended in the same transaction (a kill never
leaves the chain behind or ahead of what it covers), and `verify_run` recomputes every
entry it can from the stored rows and names the first that does not match.

What is covered (docs/packs.md, "Ledger and verify"): the run row's pipeline, file,
content hash and start time, its inputs; every trace event (its row and JSON); every
checkpoint's position, engine state and event sequence (the last one is still stored,
earlier ones were overwritten: their entries are checked by the chain alone); every
variable value written, step id appended, thread message appended and pointer made the
run's, with the original's text behind it; each context pack; the output, error and
status a run ended with. Not covered: timestamps of updates, owners, durability, the
recorded choices (RUN_STARTED and RUN_RESUMED events carry them), the pipeline parts,
checksums (CRC columns: the store's reads check them) and offset indexes.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from runtime.governance.ledger import (
    EVENT_KINDS,
    GENESIS,
    KEY_ENV,
    KINDS,
    Entry,
    Mismatch,
    canonical,
    check_chain,
    entry_hash,
    event_content,
    model_call_extra,
    sha256,
    sign,
)

TABLE = "run_ledger"
# A checkpoint entry is written at least every SEAL_EVERY checkpoints (LedgerWriter).
SEAL_EVERY = 32


def migrate(db: sqlite3.Connection) -> None:
    """m012: the provenance ledger, one row per entry (runs stored before have none)."""
    db.execute(
        f"CREATE TABLE {TABLE} (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,"
        " content TEXT NOT NULL, content_hash TEXT NOT NULL, prev TEXT NOT NULL,"
        " hash TEXT NOT NULL, mac TEXT, PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
    )


# m014: a checkpoint's own entry is stored in the row of the last trace event it writes (a
# page the checkpoint writes anyway: a separate table row cost one more page per commit);
# entries of a transaction that writes no event, and the other entries of one that does,
# stay in run_ledger. Both places together are the chain (ordered by seq).
EVENT_COLUMNS = ("seq", "kind", "content", "content_hash", "prev", "hash", "mac")
NO_ENTRY = (None,) * len(EVENT_COLUMNS)


def migrate_events(db: sqlite3.Connection) -> None:
    """m014: the ledger_* columns of the events table (NULL in rows that hold no entry)."""
    for column, type_ in zip(EVENT_COLUMNS, ("INTEGER",) + ("TEXT",) * 6, strict=True):
        db.execute(f"ALTER TABLE events ADD COLUMN ledger_{column} {type_}")


def with_entry(data: list[tuple[Any, ...]], entry: tuple[Any, ...] | None) -> list[tuple[Any, ...]]:
    """Event rows with their ledger columns: the entry (seq ... mac) in the last one."""
    if not data:
        return data
    out = [(*row, *NO_ENTRY) for row in data[:-1]]
    out.append((*data[-1], *(entry or NO_ENTRY)))
    return out


EVENT_INSERT = f"INSERT INTO events VALUES ({', '.join('?' * (5 + len(EVENT_COLUMNS)))})"


# --- building entries from what the store writes ---------------------------------------


def event_items(
    events: list[dict[str, Any]], rows: list[tuple[Any, ...]]
) -> tuple[list[tuple[str, Any]], list[Any]]:
    """(entries of their own, covered by the batch) for events and their stored rows."""
    own: list[tuple[str, Any]] = []
    batch: list[Any] = []
    for event, (_, seq, type_, step_id, data) in zip(events, rows, strict=True):
        kind = EVENT_KINDS.get(type_)
        content = event_content(seq, type_, step_id, data)
        if kind is None:
            batch.append(content)
            continue
        if kind == "model_call":
            content.update(model_call_extra(event))
        own.append((kind, content))
    return own, batch


def run_content(
    run_id: str, pipeline: Any, created_at: float, inputs: str, batch: list[Any]
) -> dict[str, Any]:
    """What a `run` entry records."""
    return {
        "run_id": run_id,
        "pipeline": pipeline.name,
        "file": pipeline.file,
        "content_hash": pipeline.content_hash,
        "created_at": created_at,
        "inputs": sha256(inputs),
        "events": batch,
    }


def checkpoint_items(
    db: sqlite3.Connection,
    run_id: str,
    events: list[dict[str, Any]],
    data: list[tuple[Any, ...]],
    *,
    position: str | None,
    state: str,
    event_seq: int,
    steps: int,
    variables: list[tuple[str, str, str, str]],
    removed: list[tuple[str, str]],
    new_steps: list[tuple[str, int, str]],
    new_messages: list[tuple[str, str, int, str]],
    pointers: list[tuple[str]],
    packs: dict[tuple[str, int], tuple[str, str, str]] | None = None,
) -> list[tuple[str, Any]]:
    """The entries of one checkpoint: its events' own entries, then the checkpoint entry."""
    record = (
        events, data, variables, removed, new_steps, new_messages, pointers,
        position, state, event_seq, steps,
    )  # fmt: skip
    return batch_items(db, run_id, [record], packs)


# One checkpoint as the store wrote it (checkpoint_items' arguments, in that order): kept
# in memory until its batch is sealed.
Record = tuple[Any, ...]


def batch_items(
    db: sqlite3.Connection,
    run_id: str,
    records: list[Record],
    packs: dict[tuple[str, int], tuple[str, str, str]] | None = None,
) -> list[tuple[str, Any]]:
    """The entries sealing checkpoints written in turn: the own entries of their events and
    packs, then one checkpoint entry covering every row they wrote (the position, engine
    state and event sequence of the last; each variable's last digest; every step, thread
    message, pointer and other event).

    Variables are recorded by the BLAKE2b digest the store computes anyway (run_vars.hash
    is that digest, but verify recomputes it from the value).
    """
    own: list[tuple[str, Any]] = []
    batch: list[Any] = []
    written: dict[str, str] = {}
    gone: set[str] = set()
    step_ids: list[list[Any]] = []
    threads: list[list[Any]] = []
    made = []
    for events, data, variables, removed, new_steps, new_messages, pointers, *_ in records:
        packed = False
        for event, (_, seq, type_, step_id, text) in zip(events, data, strict=True):
            kind = EVENT_KINDS.get(type_)
            # event_content, inlined: a batch holds an event per step or more
            content = {"seq": seq, "type": type_, "step_id": step_id, "sha256": sha256(text)}
            if kind is None:
                batch.append(content)
                packed = packed or type_ == PACK_EVENT
                continue
            if kind == "model_call":
                content.update(model_call_extra(event))
            own.append((kind, content))
        if packed:
            own.extend(pack_items(db, run_id, events, packs))
        for _, name, digest, _ in variables:
            written[name] = digest
            gone.discard(name)
        for _, name in removed:
            written.pop(name, None)
            gone.add(name)
        for _, n, step_id in new_steps:
            step_ids.append([n, step_id])
        for _, tid, n, text in new_messages:
            threads.append([tid, n, sha256(text)])
        for (pointer_id,) in pointers:  # rare: only steps that compacted or summarised
            row = db.execute(
                "SELECT sha256, kind FROM run_pointers WHERE run_id = ? AND pointer_id = ?",
                (run_id, pointer_id),
            ).fetchone()
            made.append([pointer_id, row[0], row[1]] if row else [pointer_id, None, None])
    *_, position, state, event_seq, steps = records[-1]
    content = {
        "position": position,
        "engine": sha256(state),
        "event_seq": event_seq,
        "steps": steps,
        "vars": sorted([name, digest] for name, digest in written.items()),
        "removed": sorted(gone),
        "step_ids": step_ids,
        "threads": threads,
        "pointers": sorted(made),
        "events": batch,
    }
    return [*own, ("checkpoint", content)]


def must_seal(events: list[dict[str, Any]], pointers: list[Any], status: str) -> bool:
    """Whether a checkpoint seals its batch now: it holds an event with an entry of its own
    (a model call, a tool call, a decision, a summary), a context pack, pointers made the
    run's, or the run's end."""
    if pointers or status != "running":
        return True
    for event in events:
        kind = event.get("type")
        if kind in EVENT_KINDS or kind == PACK_EVENT:
            return True
    return False


# The event a model call's context pack is named by (runtime/context/packs.py): its pack is
# stored before the checkpoint and is the run's once the event is, as a pointer is.
PACK_EVENT = "CONTEXT_PACK"


def pack_items(
    db: sqlite3.Connection,
    run_id: str,
    events: list[dict[str, Any]],
    known: dict[tuple[str, int], tuple[str, str, str]] | None = None,
) -> list[tuple[str, Any]]:
    """A `pack` entry for each context pack this checkpoint's events name.

    `known`: (step id, pack id, sha256) of packs this store wrote, by (run, seq): the SHA-256
    of the bytes it stored, so the body is not read back and hashed again (taken out here).
    """
    out: list[tuple[str, Any]] = []
    for event in events:
        if event.get("type") != PACK_EVENT or not isinstance(event.get("pack_seq"), int):
            continue
        hit = known.pop((run_id, event["pack_seq"]), None) if known is not None else None
        if hit is not None:
            step_id, pack_id, digest = hit
            out.append(
                (
                    "pack",
                    {
                        "seq": event["pack_seq"],
                        "step_id": step_id,
                        "pack_id": pack_id,
                        "sha256": digest,
                    },
                )
            )
            continue
        row = db.execute(
            "SELECT seq, step_id, pack_id, body FROM run_context_packs"
            " WHERE run_id = ? AND seq = ?",
            (run_id, event["pack_seq"]),
        ).fetchone()
        if row is not None:
            out.append(("pack", pack_content(*row)))
    return out


def end_content(status: str, output: str, error: str | None) -> dict[str, Any]:
    """What an `end` entry records."""
    return {
        "status": status,
        "output": sha256(output),
        "error": None if error is None else sha256(error),
    }


def pack_content(seq: int, step_id: str, pack_id: str, body: str | bytes) -> dict[str, Any]:
    """What a `pack` entry records of a stored context pack (table run_context_packs)."""
    return {"seq": seq, "step_id": step_id, "pack_id": pack_id, "sha256": sha256(body)}


def _head(db: sqlite3.Connection, run_id: str) -> tuple[int, str]:
    """A run's stored head (seq, hash): the last entry of run_ledger or of an event row."""
    row = db.execute(
        f"SELECT seq, hash FROM (SELECT seq, hash FROM {TABLE} WHERE run_id = ?"
        " UNION ALL SELECT ledger_seq, ledger_hash FROM events"
        " WHERE run_id = ? AND ledger_seq IS NOT NULL) ORDER BY seq DESC LIMIT 1",
        (run_id, run_id),
    ).fetchone()
    return (row[0], row[1]) if row else (0, GENESIS)


class LedgerWriter:
    """Appends a run's entries inside the store's transaction (one per store).

    Checkpoints are sealed in batches (`checkpoint`): a checkpoint that calls for no entry
    of its own is kept in memory and covered by the next checkpoint entry, written at a
    model call, tool call, decision, summary, pack or pointer, at the run's end, and at
    least every `seal_every` checkpoints. Until then its rows are unprotected (a run killed
    meanwhile gets them sealed late: the SQLite store's `seal_tail`). The default, 1, seals
    every checkpoint: a store that cannot seal a tail late (Postgres, as yet) keeps it.

    The head of each run it wrote is remembered once its transaction committed (`settle`),
    so a checkpoint does not read it back; a head another writer moved on is found by the
    primary key (the insert of a taken seq fails) and read again. An entry kept in an event
    row (m014) has no such key: two stores appending to one run at once (its owner keeps
    others off) would fork the chain there, and verify names the entry.
    """

    def __init__(self, key: bytes | None, seal_every: int = 1) -> None:
        if seal_every < 1:
            raise ValueError(f"seal_every must be at least 1, got {seal_every}")
        self.key = key  # from $RUNTIME_LEDGER_KEY; never written anywhere
        self.seal_every = seal_every
        self._heads: dict[str, tuple[int, str]] = {}  # committed heads
        self._pending: dict[str, tuple[int, str] | None] = {}  # heads of open transactions
        self._batches: dict[str, list[Record]] = {}  # committed checkpoints not yet sealed
        self._staged: dict[str, Record] = {}  # the open transaction's, kept on commit
        self._sealed: set[str] = set()  # runs whose open transaction seals their batch

    def checkpoint(
        self,
        db: sqlite3.Connection,
        run_id: str,
        record: Record,
        *,
        status: str,
        packs: dict[tuple[str, int], tuple[str, str, str]] | None = None,
        last_in_event: bool = False,
    ) -> tuple[Any, ...] | None:
        """Seal the run's batch with this checkpoint when it must, else keep it for later.

        Returns what `append` returns (the entry for the last event row), None when kept.
        """
        batch = self._batches.get(run_id, [])
        events, pointers = record[0], record[6]
        if len(batch) + 1 < self.seal_every and not must_seal(events, pointers, status):
            self._staged[run_id] = record
            return None
        self._sealed.add(run_id)
        items = batch_items(db, run_id, [*batch, record], packs)
        return self.append(db, run_id, items, last_in_event=last_in_event)

    def seal(self, db: sqlite3.Connection, run_id: str) -> None:
        """Seal the run's batch now (the run ends), in the caller's transaction."""
        batch = self._batches.get(run_id)
        if batch:
            self._sealed.add(run_id)
            self.append(db, run_id, batch_items(db, run_id, batch))

    def forget(self, run_id: str) -> None:
        """Drop what is kept of a run (its tail was sealed from the stored rows)."""
        self._batches.pop(run_id, None)
        self._heads.pop(run_id, None)

    def append(
        self,
        db: sqlite3.Connection,
        run_id: str,
        items: list[tuple[str, Any]],
        *,
        last_in_event: bool = False,
    ) -> tuple[Any, ...] | None:
        """Chain entries after the run's head; the caller's transaction commits them.

        With `last_in_event` the last entry is not inserted in run_ledger but returned (seq
        ... mac) for the caller to store in its last event row (m014, `with_entry`).
        """
        if not items:
            return None
        head = self._heads.get(run_id)
        for fresh in (False, True):
            if head is None or fresh:
                head = _head(db, run_id)
            rows = self._rows(run_id, head, items)
            kept = rows[-1] if last_in_event else None
            try:
                db.executemany(
                    f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows[:-1] if last_in_event else rows,
                )
            except sqlite3.IntegrityError:
                if fresh:
                    raise
                continue  # another writer moved the head on: read it and chain again
            # A run's end forgets its head (a store serving many runs keeps no head per run
            # forever); a resume after it reads the head from the table again.
            self._pending[run_id] = None if rows[-1][2] == "end" else (rows[-1][1], rows[-1][6])
            return None if kept is None else kept[1:]
        return None

    def _rows(
        self, run_id: str, head: tuple[int, str], items: list[tuple[str, Any]]
    ) -> list[tuple[Any, ...]]:
        seq, prev = head
        rows = []
        for kind, content in items:
            seq += 1
            text = canonical(content)
            digest = sha256(text)
            this = entry_hash(prev, kind, digest, seq)
            mac = sign(self.key, this) if self.key is not None else None
            rows.append((run_id, seq, kind, text.decode(), digest, prev, this, mac))
            prev = this
        return rows

    def settle(self, run_id: str, committed: bool) -> None:
        """After the transaction: keep the head it wrote, or forget it (rolled back); keep
        the checkpoint it staged, or drop the batch it sealed."""
        staged = self._staged.pop(run_id, None)
        if run_id in self._sealed:
            self._sealed.discard(run_id)
            if committed:
                self._batches.pop(run_id, None)
        elif committed and staged is not None:
            self._batches.setdefault(run_id, []).append(staged)
        had = run_id in self._pending
        pending = self._pending.pop(run_id, None)
        if committed and pending is not None:
            self._heads[run_id] = pending
        elif had or not committed:
            self._heads.pop(run_id, None)


# --- verifying --------------------------------------------------------------------------


@dataclass
class Report:
    """What `runtime verify` found for one run."""

    run_id: str
    entries: int = 0
    head: str = GENESIS
    signed: int = 0
    key: bool = False
    mismatches: list[Mismatch] = field(default_factory=list)
    # rows a step stored after the run's last checkpoint (a killed run): not yet covered
    provisional: list[str] = field(default_factory=list)
    # entries that sealed a killed run's rows late (LEDGER_SEALED_LATE): reported, not failed
    warnings: list[Mismatch] = field(default_factory=list)
    # rows a run that is not running wrote after its last entry: sealed late by the store
    unsealed: Tail | None = None

    @property
    def ok(self) -> bool:
        """No mismatch, and no unsealed tail left (the store seals one before answering)."""
        return not self.mismatches and self.unsealed is None

    @property
    def first(self) -> Mismatch | None:
        """The first entry that does not match (rows no entry covers come last)."""
        if not self.mismatches:
            return None
        return min(self.mismatches, key=_order)

    def to_dict(self) -> dict[str, Any]:
        first = self.first
        return {
            "run_id": self.run_id,
            "ok": self.ok,
            "entries": self.entries,
            "head": self.head,
            "signed": self.signed,
            "key": self.key,
            "first_mismatch": first.to_dict() if first else None,
            "provisional": self.provisional,
            "warnings": [w.to_dict() for w in self.warnings],
            "unsealed": self.unsealed.describe() if self.unsealed is not None else [],
            "mismatches": [m.to_dict() for m in sorted_mismatches(self.mismatches)],
        }


def sorted_mismatches(found: list[Mismatch]) -> list[Mismatch]:
    return sorted(found, key=_order)


def _order(m: Mismatch) -> int:
    """By entry number; one without a number, or an edited one that is not, sorts last."""
    return m.seq if isinstance(m.seq, int) else 1 << 62


def _s(value: Any) -> Any:
    """A TEXT value read as bytes, as the string it was written from (bad bytes kept apart)."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _shape(entry: Entry) -> str:
    """An entry's kind, or (a kind that is no kind: changed) the kind its content has."""
    if entry.kind in KINDS:
        return entry.kind
    c = entry.content if isinstance(entry.content, dict) else {}
    for kind, key in (("checkpoint", "engine"), ("run", "inputs"), ("end", "output")):
        if key in c:
            return kind
    return "pack" if "pack_id" in c else "model_call"


def _describe(entry: Entry) -> str:
    c = entry.content if isinstance(entry.content, dict) else {}
    kind = _shape(entry)
    if kind == "run":
        return "the run row, its inputs and its first events"
    if kind == "checkpoint":
        return f"the checkpoint at event {c.get('event_seq')} (position {c.get('position')!r})"
    if kind == "end":
        return f"the end of the run (status {c.get('status')!r}, output, error)"
    if kind == "pack":
        return f"context pack {c.get('seq')} of step {c.get('step_id')!r} ({c.get('pack_id')})"
    return f"event {c.get('seq')} {c.get('type')} of step {c.get('step_id')!r}"


class _Rows:
    """A run's covered rows, read once as bytes (a tampered byte never fails a decode)."""

    def __init__(self, db: sqlite3.Connection, run_id: str) -> None:
        key = run_id.encode("utf-8", "surrogateescape")

        def q(table: str, key_column: str, columns: str, rowid: bool = True) -> list[Any]:
            # A rowid table is read by rowid, so every column comes from the table's own
            # record, never from its primary-key index (a changed byte in the record must
            # show); the key is checked here, not only by the index that found the row.
            where = (
                f"rowid IN (SELECT rowid FROM {table} WHERE {key_column} = ?)"
                if rowid
                else f"{key_column} = ?"
            )
            sql = f"SELECT {key_column}, {columns} FROM {table} WHERE {where}"
            return [r[1:] for r in db.execute(sql, (run_id,)).fetchall() if r[0] == key]

        run = q("runs", "id", "pipeline, file, content_hash, created_at, status, output, error")
        self.run = run[0] if run else None
        inputs = q("run_inputs", "run_id", "inputs")
        self.inputs = inputs[0][0] if inputs else None
        cols = ", ".join(f"ledger_{c}" for c in EVENT_COLUMNS)
        events = q("events", "run_id", f"seq, type, step_id, data, {cols}")
        self.events = {r[0]: r[:4] for r in events}
        cp = q("checkpoints", "run_id", "position, engine, event_seq, steps")
        self.checkpoint = cp[0] if cp else None
        self.vars = {r[0]: r[1] for r in q("run_vars", "run_id", "name, value")}
        self.steps = {r[0]: r[1] for r in q("run_steps", "run_id", "n, step_id", False)}
        self.threads = {
            (r[0], r[1]): r[2] for r in q("run_threads", "run_id", "thread_id, n, message", False)
        }
        self.pointers = {
            r[0]: (r[1], r[2])
            for r in q("run_pointers", "run_id", "pointer_id, sha256, kind", False)
        }
        self.pending = {r[0] for r in q("run_pointers_pending", "run_id", "pointer_id", False)}
        tables = {
            _s(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        self.packs = (
            {
                r[0]: r
                for r in q("run_context_packs", "run_id", "seq, step_id, pack_id, body", False)
            }
            if "run_context_packs" in tables
            else {}
        )
        # the chain: run_ledger's rows and the entries kept in event rows (m014)
        kept = [r[4:] for r in events if any(v is not None for v in r[4:])]
        self.ledger = sorted(
            q(TABLE, "run_id", "seq, kind, content, content_hash, prev, hash, mac", False) + kept,
            key=lambda r: r[0] if isinstance(r[0], int) else -1,
        )
        self.db = db


def _entries(rows: list[Any]) -> list[Entry]:
    out = []
    for seq, kind, text, digest, prev, head, mac in rows:
        raw = text if isinstance(text, bytes) else str(text).encode()
        try:
            content = json.loads(raw)
        except (ValueError, RecursionError):
            content = None
        out.append(Entry(seq, _s(kind), content, raw, _s(digest), _s(prev), _s(head), _s(mac)))
    return out


def verify_run(
    db: sqlite3.Connection, run_id: str, key: bytes | None, live: bool = False
) -> Report:
    """Recompute a run's chain from its stored rows (`db` reads TEXT as bytes).

    Rows a run wrote after its last entry (checkpoints not sealed yet) are listed as
    provisional while it runs (`live`); when it does not, `report.unsealed` names them for
    the store to seal late (`seal_tail`).
    """
    rows = _Rows(db, run_id)
    entries = _entries(rows.ledger)
    chain = check_chain(entries, key, _describe)
    report = Report(run_id, len(entries), chain.head, chain.signed, key is not None)
    report.mismatches.extend(chain.mismatches)
    coverage = _Coverage(rows, entries, report.mismatches)
    coverage.check()
    report.provisional = coverage.provisional
    report.warnings = coverage.sealed_late
    tail = coverage.tail
    if tail is not None and tail.rows():
        if live:
            report.provisional.extend(
                f"{what} (written after entry {len(entries)}, sealed with the run's next "
                "checkpoint entry)"
                for what in tail.describe()
            )
        else:
            report.unsealed = tail
    return report


@dataclass
class Tail:
    """Rows a run wrote after its last entry, by kind (an unsealed batch)."""

    checkpoint: bool = False
    events: list[int] = field(default_factory=list)
    vars: list[str] = field(default_factory=list)  # written (or changed) since
    removed: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    threads: list[tuple[str, int]] = field(default_factory=list)
    pointers: list[str] = field(default_factory=list)

    def rows(self) -> int:
        return (
            int(self.checkpoint)
            + len(self.events)
            + len(self.vars)
            + len(self.removed)
            + len(self.steps)
            + len(self.threads)
            + len(self.pointers)
        )

    def describe(self) -> list[str]:
        """The rows for a person."""
        out = []
        if self.checkpoint:
            out.append("the checkpoint row")
        if self.events:
            out.append(f"events {min(self.events)}-{max(self.events)} ({len(self.events)})")
        out += [f"variable {n!r}" for n in sorted(self.vars)]
        out += [f"variable {n!r} removed" for n in sorted(self.removed)]
        if self.steps:
            out.append(f"steps {min(self.steps)}-{max(self.steps)} of the step list")
        out += [f"thread {t} message {n}" for t, n in sorted(self.threads)]
        out += [f"pointer {p}" for p in sorted(self.pointers)]
        return out


def tail_content(db: sqlite3.Connection, run_id: str, tail: Tail, why: str) -> dict[str, Any]:
    """A checkpoint entry's content for an unsealed tail, read from the stored rows (`db`
    reads TEXT as bytes), marked `late` (why: resume or verify)."""
    rows = _Rows(db, run_id)
    cp = rows.checkpoint
    wanted = set(tail.events)
    events = [
        event_content(r[0], _s(r[1]), _s(r[2]), r[3] or b"")
        for seq, r in sorted(rows.events.items())
        if seq in wanted
    ]
    stored = {_s(k): v for k, v in rows.vars.items()}
    threads = {(_s(t), n): m for (t, n), m in rows.threads.items()}
    pointers = {_s(p): (_s(sha), _s(kind)) for p, (sha, kind) in rows.pointers.items()}
    return {
        "position": None if cp is None else _s(cp[0]),
        "engine": None if cp is None else sha256(cp[1] or b""),
        "event_seq": None if cp is None else cp[2],
        "steps": None if cp is None else cp[3],
        "vars": sorted(
            [n, _var_digest(stored[n])] for n in set(tail.vars) if stored.get(n) is not None
        ),
        "removed": sorted(set(tail.removed)),
        "step_ids": [[n, _s(rows.steps[n])] for n in sorted(set(tail.steps))],
        "threads": [[t, n, sha256(threads[(t, n)])] for t, n in sorted(set(tail.threads))],
        "pointers": sorted([p, *pointers[p]] for p in set(tail.pointers)),
        "events": events,
        "late": why,
    }


class _Coverage:
    """Compares each entry with the rows it covers, and finds rows no entry covers."""

    def __init__(self, rows: _Rows, entries: list[Entry], out: list[Mismatch]) -> None:
        self.rows, self.entries, self.out = rows, entries, out
        self.events_seen: set[int] = set()
        # row key -> (entry, recorded) for rows later entries may replace
        self.vars: dict[str, tuple[Entry, str | None]] = {}
        self.steps: dict[int, tuple[Entry, str]] = {}
        self.threads: dict[tuple[str, int], tuple[Entry, str]] = {}
        self.pointers: dict[str, tuple[Entry, list[Any]]] = {}
        self.packs_seen: set[int] = set()
        self.unread: list[Entry] = []  # entries whose content did not decode
        self.late = False  # comparing the rows as the last entries left them
        self.provisional: list[str] = []  # stored after the last checkpoint of a live run
        self.sealed_late: list[Mismatch] = []  # entries that sealed rows late (warnings)
        # Rows written after the last entry may be an unsealed batch, unless the chain ends
        # with the run's end and the run is not running again (then every row is sealed).
        status = _s(rows.run[4]) if rows.run is not None else None
        at_rest = bool(entries) and _shape(entries[-1]) == "end" and status != "running"
        # A run with no entry at all has no ledger (LEDGER_MISSING): nothing to seal.
        self.tail: Tail | None = None if at_rest or not entries else Tail()

    def bad(self, entry: Entry | None, reason: str, covers: str | None = None) -> None:
        if entry is None:  # a row no entry covers: named as the entry after the chain's end
            after = len(self.entries) + 1
            self.out.append(
                Mismatch(
                    after, None, covers or "", f"{reason} (the chain ends at entry {after - 1})"
                )
            )
        else:
            # A row as the last entries left it is blamed on the entry that recorded it,
            # unless a later entry that does not decode could have recorded it anew.
            later = [u for u in self.unread if u.seq > entry.seq] if self.late else []
            if later:
                entry, covers = later[0], None
            self.out.append(Mismatch(entry.seq, entry.kind, covers or _describe(entry), reason))

    def check(self) -> None:
        last_cp = None
        last_end = None
        for entry in self.entries:
            c = entry.content
            if not isinstance(c, dict):
                self.bad(entry, "its content is not a JSON object")
                self.unread.append(entry)
                continue
            try:
                kind = _shape(entry)
                if kind == "run":
                    self.run(entry, c)
                elif kind == "checkpoint":
                    self.checkpoint(entry, c)
                    last_cp = (entry, c)
                elif kind == "end":
                    last_end = (entry, c)
                elif kind == "pack":
                    self.pack(entry, c)
                else:
                    self.event(entry, c, own=True)
            except (KeyError, TypeError, ValueError) as exc:
                self.bad(entry, f"its content is not what a {entry.kind} entry holds ({exc})")
                self.unread.append(entry)
        self.final(last_cp, last_end)

    # --- per entry -------------------------------------------------------------------
    def event(self, entry: Entry, c: dict[str, Any], *, own: bool) -> None:
        seq = c["seq"]
        if not isinstance(seq, int):
            raise TypeError("seq")
        self.events_seen.add(seq)
        row = self.rows.events.get(seq)
        what = f"event {seq} ({c.get('type')}, step {c.get('step_id')!r})"
        if row is None:
            self.bad(entry, "is not in the events table", what)
            return
        got = event_content(row[0], _s(row[1]), _s(row[2]), row[3] or b"")
        if own and _shape(entry) == "model_call":
            try:
                got.update(model_call_extra(json.loads(row[3])))
            except (ValueError, TypeError, AttributeError, RecursionError):
                got["prompt_sha256"] = None
        if canonical(got) != canonical(c):
            self.bad(entry, "differs from what the entry recorded", what)

    def run(self, entry: Entry, c: dict[str, Any]) -> None:
        for e in c["events"]:
            self.event(entry, e, own=False)
        run = self.rows.run
        if run is None or self.rows.inputs is None:
            self.bad(entry, "the run row or its inputs are missing")
            return
        got = {
            "run_id": c.get("run_id"),
            "pipeline": _s(run[0]),
            "file": _s(run[1]),
            "content_hash": _s(run[2]),
            "created_at": run[3],
            "inputs": sha256(self.rows.inputs),
            "events": c["events"],
        }
        if canonical(got) != canonical(c):
            differs = [k for k in got if canonical(got[k]) != canonical(c.get(k))]
            self.bad(entry, f"the run row differs in {', '.join(differs) or 'its fields'}")
        problem = _stored_text_problem(self.rows.db, self.rows.inputs)
        if problem:
            self.bad(entry, f"the inputs' {problem}")

    def checkpoint(self, entry: Entry, c: dict[str, Any]) -> None:
        if c.get("late"):
            self.sealed_late.append(
                Mismatch(
                    entry.seq,
                    entry.kind,
                    _describe(entry),
                    f"sealed late (at {c['late']}): {_late_rows(c)} were written by checkpoints"
                    " of a run killed before their batch was sealed, unprotected until then",
                    code="LEDGER_SEALED_LATE",
                )
            )
        for e in c["events"]:
            self.event(entry, e, own=False)
        for name, digest in c["vars"]:
            self.vars[name] = (entry, digest)
        for name in c["removed"]:
            self.vars[name] = (entry, None)
        for n, step_id in c["step_ids"]:
            self.steps[n] = (entry, step_id)
        for tid, n, digest in c["threads"]:
            self.threads[(tid, n)] = (entry, digest)
        for pointer in c["pointers"]:
            self.pointers[pointer[0]] = (entry, pointer)

    def pack(self, entry: Entry, c: dict[str, Any]) -> None:
        seq = c["seq"]
        self.packs_seen.add(seq)
        row = self.rows.packs.get(seq)
        what = f"context pack {seq}"
        if row is None:
            self.bad(entry, "is not in the run_context_packs table", what)
            return
        got = pack_content(row[0], _s(row[1]), _s(row[2]), row[3] or b"")
        if canonical(got) != canonical(c):
            self.bad(entry, "differs from what the entry recorded", what)

    # --- after the last entry ----------------------------------------------------------
    def final(self, last_cp: Any, last_end: Any) -> None:
        rows = self.rows
        self.late = True
        if self.tail is not None and not self.advanced(last_cp):
            self.tail = None  # no checkpoint since the last entry: every difference is one
        if last_cp is not None:
            entry, c = last_cp
            cp = rows.checkpoint
            got = (
                None
                if cp is None
                else {
                    "position": _s(cp[0]),
                    "engine": sha256(cp[1] or b""),
                    "event_seq": cp[2],
                    "steps": cp[3],
                }
            )
            want = {k: c.get(k) for k in ("position", "engine", "event_seq", "steps")}
            if got is None:
                self.bad(entry, "the checkpoint row is missing")
            elif canonical(got) != canonical(want) and self.tail is not None:
                self.tail.checkpoint = True
            elif canonical(got) != canonical(want):
                differs = [k for k in got if canonical(got[k]) != canonical(want[k])]
                reason = f"the checkpoint row differs in {', '.join(differs)}"
                # An entry missing after it (one kept in an event row goes with the row,
                # m014) may have recorded this row: it is named, not the one before.
                gone = [
                    m.seq
                    for m in self.out
                    if m.kind is None
                    and isinstance(m.seq, int)
                    and m.seq > entry.seq
                    and m.reason.startswith("is missing")
                ]
                if gone:
                    self.out.append(Mismatch(min(gone), None, "checkpoints", reason))
                else:
                    self.bad(entry, reason)
        elif rows.checkpoint is not None and self.tail is not None:
            self.tail.checkpoint = True
        elif rows.checkpoint is not None:
            self.bad(None, "a checkpoint row is stored but no entry covers it", "checkpoints")
        self.keyed_rows()
        self.end(last_end)
        newest_event = max(self.events_seen, default=0)
        for seq in sorted(set(rows.events) - self.events_seen):
            if self.tail is not None and isinstance(seq, int) and seq > newest_event:
                self.tail.events.append(seq)
                continue
            self.bad(None, "stored but in no ledger entry", f"event {seq}")
        # Packs stored after the last checkpoint, by a step killed before it, are provisional
        # (a resume drops them) until the run has ended.
        ended = bool(self.entries) and _shape(self.entries[-1]) == "end"
        newest = max(self.packs_seen, default=0)
        for seq in sorted(set(rows.packs) - self.packs_seen):
            if not ended and isinstance(seq, int) and seq > newest:
                self.provisional.append(f"context pack {seq}")
                continue
            self.bad(None, "stored but in no ledger entry", f"context pack {seq}")

    def advanced(self, last_cp: Any) -> bool:
        """Whether the checkpoint row is past the last entry (more steps or events): only
        then can rows differ because checkpoints were written and not yet sealed."""
        cp = self.rows.checkpoint
        if cp is None:
            return False
        if last_cp is None:  # no entry has covered a checkpoint row yet: this one is new
            return True
        steps = last_cp[1].get("steps")
        newest = max(self.events_seen, default=0)
        more_steps = isinstance(cp[3], int) and isinstance(steps, int) and cp[3] > steps
        return more_steps or (isinstance(cp[2], int) and cp[2] > newest)

    def keyed_rows(self) -> None:
        rows = self.rows
        for name, (entry, digest) in self.vars.items():
            value = rows.vars.get(name.encode("utf-8", "surrogateescape"))
            what = f"variable {name!r}"
            tail = self.tail
            if digest is None:
                if value is not None and tail is not None:
                    tail.vars.append(name)
                elif value is not None:
                    self.bad(entry, "was removed here but is stored", what)
            elif value is None:
                if tail is not None:
                    tail.removed.append(name)
                else:
                    self.bad(entry, "is missing", what)
            elif _var_digest(value) != digest and tail is not None:
                tail.vars.append(name)
            elif _var_digest(value) != digest:
                self.bad(entry, "differs from what the entry recorded", what)
                continue
            if value is not None and (problem := _stored_text_problem(rows.db, value)):
                self.bad(entry, problem, what)
        for raw in rows.vars:
            if _s(raw) in self.vars:
                continue
            if self.tail is not None:
                self.tail.vars.append(_s(raw))
                if problem := _stored_text_problem(rows.db, rows.vars[raw]):
                    after = len(self.entries) + 1  # the entry that will seal it
                    self.out.append(Mismatch(after, None, f"variable {_s(raw)!r}", problem))
            else:
                self.bad(None, "stored but in no ledger entry", f"variable {_s(raw)!r}")
        for n, (entry, step_id) in self.steps.items():
            got = rows.steps.get(n)
            if got is None or _s(got) != step_id:
                self.bad(entry, f"differs ({_s(got)!r} stored)", f"step {n} of the step list")
        newest_step = max(self.steps, default=-1)
        for n in sorted(set(rows.steps) - set(self.steps), key=_order_key):
            if self.tail is not None and isinstance(n, int) and n > newest_step:
                self.tail.steps.append(n)
                continue
            self.bad(None, "stored but in no ledger entry", f"step {n} of the step list")
        threads = {(_s(t), n): m for (t, n), m in rows.threads.items()}
        for key, (entry, digest) in self.threads.items():
            message = threads.get(key)
            if message is None or sha256(message) != digest:
                self.bad(
                    entry,
                    "differs from what the entry recorded",
                    f"thread {key[0]} message {key[1]}",
                )
        for key in set(threads) - set(self.threads):
            if self.tail is not None:
                self.tail.threads.append(key)
                continue
            self.bad(None, "stored but in no ledger entry", f"thread {key[0]} message {key[1]}")
        self.pointer_rows()

    def pointer_rows(self) -> None:
        rows = self.rows
        stored = {_s(p): (_s(sha), _s(kind)) for p, (sha, kind) in rows.pointers.items()}
        pending = {_s(p) for p in rows.pending}
        for pid, (entry, (_, sha, kind)) in self.pointers.items():
            what = f"pointer {pid}"
            got = stored.get(pid)
            if got != (sha, kind):
                self.bad(entry, f"differs from what the entry recorded ({got} stored)", what)
                continue
            problem = _original_problem(rows.db, sha)
            if problem:
                self.bad(entry, f"its original {problem}", what)
        ended = bool(self.entries) and _shape(self.entries[-1]) == "end"
        for pid in sorted(set(stored) - set(self.pointers)):
            if pid in pending and not ended:
                self.provisional.append(f"pointer {pid}")
                continue
            if self.tail is not None and pid not in pending:
                self.tail.pointers.append(pid)
                problem = _original_problem(rows.db, stored[pid][0])
                if problem:
                    self.bad(None, f"its original {problem}", f"pointer {pid}")
                continue
            self.bad(None, "stored but in no ledger entry", f"pointer {pid}")

    def end(self, last_end: Any) -> None:
        run = self.rows.run
        if run is None:
            return
        status, output, error = _s(run[4]), run[5], run[6]
        if last_end is None:
            if output is not None or error is not None:
                self.bad(
                    None, "the run's output or error is stored but no end entry covers it", "runs"
                )
            return
        entry, c = last_end
        got = {
            "status": c.get("status"),
            "output": None if output is None else sha256(output),
            "error": None if error is None else sha256(error),
        }
        # A resumed run is set running before its next entry: the status is compared only
        # while the end entry is the chain's head and the run is not running again.
        if entry is self.entries[-1] and status != "running":
            got["status"] = status
        if canonical(got) != canonical(c):
            differs = [k for k in got if canonical(got[k]) != canonical(c.get(k))]
            self.bad(entry, f"the run row differs in {', '.join(differs)}")


def _order_key(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int) else (1, str(value))


def _late_rows(c: dict[str, Any]) -> str:
    """What a late checkpoint entry vouched for, in a few words."""
    parts = []
    for key, word in (
        ("events", "events"),
        ("vars", "variables"),
        ("removed", "removed variables"),
        ("step_ids", "steps"),
        ("threads", "thread messages"),
        ("pointers", "pointers"),
    ):
        value = c.get(key)
        if isinstance(value, list) and value:
            parts.append(f"{len(value)} {word}")
    return ", ".join(parts) or "the checkpoint row"


def _var_digest(value: bytes) -> str:
    import hashlib

    return hashlib.blake2b(value, digest_size=16).hexdigest()


def _stored_text_problem(db: sqlite3.Connection, value: Any) -> str | None:
    """Why a row's large strings stored by content (runtime/engine/blobs.py) are not the
    texts its references name; None when they are or it has none. The row's own digest
    covers the references (sha256 and length); this covers the chunks they point to."""
    from runtime.engine import blobs

    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
    if not text.startswith(blobs.PREFIX):
        return None
    try:
        shas = sorted(blobs.refs(text))
    except (ValueError, TypeError, KeyError, IndexError):
        return "has references that are not ones"
    for sha in shas:
        problem = _original_problem(db, sha)
        if problem:
            return f"stored text {sha[:16]} {problem}"
    return None


def _original_problem(db: sqlite3.Connection, sha: str) -> str | None:
    """Why an original's stored text is not the text its sha256 names; None when it is."""
    head = db.execute("SELECT chars, chunks FROM originals WHERE sha256 = ?", (sha,)).fetchone()
    if head is None:
        return "is missing"
    import hashlib

    digest = hashlib.sha256()
    chars = count = 0
    for n, text in db.execute(
        "SELECT n, text FROM original_chunks WHERE sha256 = ? ORDER BY n", (sha,)
    ):
        if n != count:
            return f"has no chunk {count} (chunk {n!r} next)"
        raw = text if isinstance(text, bytes) else str(text).encode()
        digest.update(raw)
        chars += len(raw.decode("utf-8", "surrogateescape"))
        count += 1
    if digest.hexdigest() != sha:
        return "is not the text stored"
    if (chars, count) != (head[0], head[1]):
        return "has another length or chunk count than its row says"
    return None


def describe_report(report: Report) -> str:
    """The report for a person: one line when the record matches, else the mismatches."""
    signed = (
        f", all signed and checked with ${KEY_ENV}"
        if report.key
        else (f", {report.signed} signed (set ${KEY_ENV} to check)" if report.signed else "")
    )
    later = (
        f"; {len(report.provisional)} row(s) stored after the last checkpoint are provisional"
        " (an interrupted step's: a resume drops them)"
        if report.provisional
        else ""
    )
    warned = [
        f"  warning: entry {w.seq} ({w.kind}): {w.covers}: {w.reason} [{w.code}]"
        for w in report.warnings
    ]
    if report.ok:
        return "\n".join(
            [
                f"run {report.run_id}: ok, {report.entries} ledger entries match the stored rows"
                f"{signed}{later}; head {report.head}",
                *warned,
            ]
        )
    found = sorted_mismatches(report.mismatches)
    if not found:  # an unsealed tail the store could not seal (its ledger is off)
        rows = ", ".join(report.unsealed.describe()) if report.unsealed else ""
        return "\n".join(
            [f"run {report.run_id}: UNSEALED: rows written after the last entry: {rows}", *warned]
        )
    first = found[0]
    where = f"entry {first.seq} ({first.kind or 'missing'})"
    lines = [
        f"run {report.run_id}: MISMATCH at {where}: {first.covers}: {first.reason} [{first.code}]"
    ]
    for m in found[1:20]:
        at = f"entry {m.seq} ({m.kind or 'missing'})"
        lines.append(f"  also {at}: {m.covers}: {m.reason} [{m.code}]")
    if len(found) > 20:
        lines.append(f"  ... and {len(found) - 20} more (--json lists all)")
    return "\n".join([*lines, *warned])
