"""Provenance ledger cost (issue 26): engine steps/s with the ledger on and off, and the
ledger's cost per model call.

Run: python benchmarks/ledger.py [--pairs N] [--seal-every N] [--floor]

Checkpoints are sealed in batches (LedgerWriter: an entry at least every `--seal-every`
checkpoints, 32 by default, and at every model call, tool call, pack and run end); with
`--seal-every 1` the ledger writes an entry for every checkpoint, as before batches.
Targets: steps that call no model, ledger on within 5% of off (steps/s, checkpoint per
step, `normal` durability); a model call's ledger append under 1 ms (a MODEL_CALL event
whose prompt holds 100 evidence items). Pairs alternate on/off in fresh stores and the
median of the ratios is reported with its spread (this machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import REG, pipeline

from runtime.engine import Engine
from runtime.engine import ledger as _ledger
from runtime.engine.store import SqliteRunStore
from runtime.governance.ledger import canonical


def steps_rate(store: Any, steps: int) -> tuple[float, float]:
    """Steps/s by the wall clock, and by this process's CPU time (user + system: the WAL
    writes are system calls), which a busy shared machine disturbs less."""
    engine = Engine(pipeline(steps), registry=REG, store=store)
    t0, c0 = time.perf_counter(), time.process_time()
    result = engine.run({"n": 0, "context": "x" * 1024}, run_id=f"r{time.time_ns()}")
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert result.status == "completed", result.error
    return (steps + 1) / elapsed, (steps + 1) / cpu


class FloorWriter:
    """The least a per-checkpoint entry can cost in Python: no content JSON, no per-row
    hashes; one SHA-256 over the texts the checkpoint writes (joined), the chain hash, the
    row. Not a ledger `runtime verify` could check (it records no row by row): the floor
    any design that protects every checkpoint pays, for comparison (--floor)."""

    def __init__(self) -> None:
        self.heads: dict[str, tuple[int, str]] = {}

    def append(self, db: Any, run_id: str, items: Any, *, last_in_event: bool = False) -> Any:
        seq, prev = self.heads.get(run_id, (0, "0" * 64))
        rows = []
        for kind, content in items:
            # The run's first and last entries (once a run) as the ledger makes them.
            digest = content if isinstance(content, str) else _ledger.sha256(canonical(content))
            seq += 1
            this = hashlib.sha256(f"{prev}\n{kind}\n{digest}\n{seq}".encode()).hexdigest()
            rows.append((run_id, seq, kind, digest, digest, prev, this, None))
            prev = this
        self.heads[run_id] = (seq, prev)
        if not last_in_event:
            db.executemany(f"INSERT INTO {_ledger.TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            return None
        if len(rows) > 1:
            db.executemany(
                f"INSERT INTO {_ledger.TABLE} VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows[:-1]
            )
        return rows[-1][1:]

    def checkpoint(
        self, db: Any, run_id: str, record: Any, *, status: str, packs: Any = None,
        last_in_event: bool = False,
    ) -> Any:  # fmt: skip
        """An entry for every checkpoint, as the ledger wrote them before batches."""
        events, data, variables, _, new_steps, new_messages, _, _, state, _, _ = record
        items = floor_items(
            db, run_id, events, data, state=state, variables=variables, new_steps=new_steps,
            new_messages=new_messages,
        )  # fmt: skip
        return self.append(db, run_id, items, last_in_event=last_in_event)

    def seal(self, db: Any, run_id: str) -> None:
        pass

    def settle(self, run_id: str, committed: bool) -> None:
        pass


def floor_items(db: Any, run_id: str, events: Any, data: Any, **kw: Any) -> list[Any]:
    """One digest over what the checkpoint writes (see FloorWriter)."""
    parts = [kw["state"], *(row[4] for row in data)]
    parts += [digest for _, _, digest, _ in kw["variables"]]
    parts += [step for _, _, step in kw["new_steps"]]
    parts += [text for *_, text in kw["new_messages"]]
    return [("checkpoint", hashlib.sha256("\x00".join(parts).encode()).hexdigest())]


def floor_rate(path: str, steps: int) -> tuple[float, float]:
    """steps_rate with FloorWriter in place of the ledger."""
    store = SqliteRunStore(path)
    store._ledger = FloorWriter()  # type: ignore[assignment]
    return steps_rate(store, steps)


def model_call_event(seq: int, items: int = 100) -> dict[str, Any]:
    """A MODEL_CALL event as call_model writes it, its prompt holding `items` evidence blocks."""
    evidence = "\n".join(
        f'<evidence id="node:{i}" path="src/Billing/Invoice{i}.cs">\n'
        + f"public decimal Total{i}() => lines.Sum(l => l.Amount * {i});\n" * 4
        + "</evidence>"
        for i in range(items)
    )
    return {
        "run_id": "m",
        "seq": seq,
        "type": "MODEL_CALL",
        "step_id": "answer",
        "ts": time.time(),
        "attempt": 1,
        "model": "extractive",
        "tokens_in": 9000,
        "tokens_out": 300,
        "messages": [
            {"role": "system", "content": "You answer from the evidence only."},
            {"role": "user", "content": f"Question: how is a total computed?\n{evidence}"},
        ],
        "reply": "The total is the sum of the lines' amounts." * 5,
    }


def pack_body(items: int = 100) -> tuple[dict[str, Any], bytes, str]:
    """A context pack of `items` evidence items (as benchmarks/packs.py records), its body
    and the body's SHA-256."""
    from runtime.context import packs

    b = packs.PackBuilder(run_id="m", step_id="answer", model="m", prompt_budget=100_000)
    for i in range(items):
        b.add(
            "knowledge",
            120,
            item={
                "id": f"eshop::main::method::M{i}",
                "source": "assembly",
                "score": None,
                "reason": "a block the step's input holds",
                "content_hash": packs.content_hash(str(i)),
                "labels": None,
                "decision": "scope:*/*/unlabelled",
            },
        )
    pack = b.finish([{"role": "user", "content": "q"}], 12_000)
    return pack, b.body, b.body_sha256


def per_call_ms(calls: int = 200) -> tuple[float, float, int]:
    """CPU time of building and appending one model call's entries inside a transaction:
    its MODEL_CALL entry alone, and with its context pack's entry (as the checkpoint makes
    it: the body's SHA-256 handed over by save_pack)."""
    pack, body, digest = pack_body()
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteRunStore(f"{tmp}/runs.db")
        writer = _ledger.LedgerWriter(None)
        db = store._conn()
        times, both = [], []
        size = 0
        for seq in range(1, calls + 1):
            event = model_call_event(seq)
            rows = store._event_rows("m", [event])
            size = len(rows[0][4])
            pack_seq = store.save_pack("m", pack, body, digest)
            named = {"type": "CONTEXT_PACK", "pack_seq": pack_seq}
            db.execute("BEGIN IMMEDIATE")
            t0 = time.process_time()
            own, _ = _ledger.event_items([event], rows)
            writer.append(db, "m", own)
            t1 = time.process_time()
            writer.append(db, "m", _ledger.pack_items(db, "m", [named], store._pack_digests))
            t2 = time.process_time()
            db.execute("COMMIT")
            times.append(t1 - t0)
            both.append(t2 - t0)
        return statistics.median(times) * 1000, statistics.median(both) * 1000, size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument(
        "--floor", action="store_true", help="also the floor of a per-checkpoint entry"
    )
    parser.add_argument("--seal-every", type=int, default=_ledger.SEAL_EVERY)
    args = parser.parse_args()
    ms, both, size = per_call_ms()
    print(
        f"model call ledger append (100 items, {size:,} B event): {ms:.3f} ms CPU; "
        f"with its pack's entry: {both:.3f} ms (medians)"
    )
    ratios, on_rates, off_rates, cpu_ratios, floor_ratios = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            on_store = SqliteRunStore(f"{tmp}/on{i}.db", seal_every=args.seal_every)
            on, on_cpu = steps_rate(on_store, args.steps)
            off, off_cpu = steps_rate(SqliteRunStore(f"{tmp}/off{i}.db", ledger=False), args.steps)
            on_rates.append(on)
            off_rates.append(off)
            ratios.append(on / off)
            cpu_ratios.append(on_cpu / off_cpu)
            if args.floor:
                floor_ratios.append(floor_rate(f"{tmp}/floor{i}.db", args.steps)[1] / off_cpu)
    print(
        f"steps/s, checkpoint per step, 1 KB state: ledger on {statistics.median(on_rates):,.0f}"
        f", off {statistics.median(off_rates):,.0f}; on/off median {statistics.median(ratios):.3f}"
        f" (range {min(ratios):.3f}-{max(ratios):.3f}, {args.pairs} pairs, seal every"
        f" {args.seal_every}); by CPU time"
        f" {statistics.median(cpu_ratios):.3f} (range {min(cpu_ratios):.3f}"
        f"-{max(cpu_ratios):.3f}); load average {os.getloadavg()[0]:.2f}"
    )
    if floor_ratios:
        print(
            f"the floor of a per-checkpoint entry (FloorWriter), by CPU time: floor/off median "
            f"{statistics.median(floor_ratios):.3f} (range {min(floor_ratios):.3f}"
            f"-{max(floor_ratios):.3f})"
        )


if __name__ == "__main__":
    main()
