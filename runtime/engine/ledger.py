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
    """The entries of one checkpoint: its events' own entries, then the checkpoint entry.

    Variables are recorded by the BLAKE2b digest the store computes anyway (run_vars.hash
    is that digest, but verify recomputes it from the value).
    """
    own, batch = event_items(events, data)
    own.extend(pack_items(db, run_id, events, packs))
    made = []
    for (pointer_id,) in pointers:  # rare: only steps that compacted or summarised
        row = db.execute(
            "SELECT sha256, kind FROM run_pointers WHERE run_id = ? AND pointer_id = ?",
            (run_id, pointer_id),
        ).fetchone()
        made.append([pointer_id, row[0], row[1]] if row else [pointer_id, None, None])
    content = {
        "position": position,
        "engine": sha256(state),
        "event_seq": event_seq,
        "steps": steps,
        "vars": sorted([name, digest] for _, name, digest, _ in variables),
        "removed": sorted(name for _, name in removed),
        "step_ids": [[n, step_id] for _, n, step_id in new_steps],
        "threads": [[tid, n, sha256(text)] for _, tid, n, text in new_messages],
        "pointers": sorted(made),
        "events": batch,
    }
    return [*own, ("checkpoint", content)]


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

    The head of each run it wrote is remembered once its transaction committed (`settle`),
    so a checkpoint does not read it back; a head another writer moved on is found by the
    primary key (the insert of a taken seq fails) and read again. An entry kept in an event
    row (m014) has no such key: two stores appending to one run at once (its owner keeps
    others off) would fork the chain there, and verify names the entry.
    """

    def __init__(self, key: bytes | None) -> None:
        self.key = key  # from $RUNTIME_LEDGER_KEY; never written anywhere
        self._heads: dict[str, tuple[int, str]] = {}  # committed heads
        self._pending: dict[str, tuple[int, str] | None] = {}  # heads of open transactions

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
        """After the transaction: keep the head it wrote, or forget it (rolled back)."""
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

    @property
    def ok(self) -> bool:
        return not self.mismatches

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


def verify_run(db: sqlite3.Connection, run_id: str, key: bytes | None) -> Report:
    """Recompute a run's chain from its stored rows (`db` reads TEXT as bytes)."""
    rows = _Rows(db, run_id)
    entries = _entries(rows.ledger)
    chain = check_chain(entries, key, _describe)
    report = Report(run_id, len(entries), chain.head, chain.signed, key is not None)
    report.mismatches.extend(chain.mismatches)
    coverage = _Coverage(rows, entries, report.mismatches)
    coverage.check()
    report.provisional = coverage.provisional
    return report


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
        elif rows.checkpoint is not None:
            self.bad(None, "a checkpoint row is stored but no entry covers it", "checkpoints")
        self.keyed_rows()
        self.end(last_end)
        for seq in sorted(set(rows.events) - self.events_seen):
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

    def keyed_rows(self) -> None:
        rows = self.rows
        for name, (entry, digest) in self.vars.items():
            value = rows.vars.get(name.encode("utf-8", "surrogateescape"))
            what = f"variable {name!r}"
            if digest is None:
                if value is not None:
                    self.bad(entry, "was removed here but is stored", what)
            elif value is None:
                self.bad(entry, "is missing", what)
            elif _var_digest(value) != digest:
                self.bad(entry, "differs from what the entry recorded", what)
            elif problem := _stored_text_problem(rows.db, value):
                self.bad(entry, problem, what)
        for raw in rows.vars:
            if _s(raw) not in self.vars:
                self.bad(None, "stored but in no ledger entry", f"variable {_s(raw)!r}")
        for n, (entry, step_id) in self.steps.items():
            got = rows.steps.get(n)
            if got is None or _s(got) != step_id:
                self.bad(entry, f"differs ({_s(got)!r} stored)", f"step {n} of the step list")
        for n in set(rows.steps) - set(self.steps):
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
    if report.ok:
        return (
            f"run {report.run_id}: ok, {report.entries} ledger entries match the stored rows"
            f"{signed}{later}; head {report.head}"
        )
    found = sorted_mismatches(report.mismatches)
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
    return "\n".join(lines)
