"""The memory store under hostile input: fuzzed seed files, secrets in every field, damage.

- A fuzzed seed file (mutations of the shipped eShop seeds: keys dropped, values of the
  wrong type or out of range, deep nesting, bytes that are not UTF-8, cut files) is
  stored whole or refused with MEMORY_INVALID / MEMORY_UNLABELLED, nothing stored; never
  another exception.
- A configured key written into every field of a memory or experience (the embedding
  API, the `remember` action, `runtime memories import`) is in no byte of the store.
- Every byte of every stored value of a small store, changed one at a time in the file:
  every search answers exactly what it answered before (an item may be hidden) or
  fails with MEMORY_STORE_ERROR; an item is never shown changed, nor to a caller its
  stored labels do not allow. A damaged labels cell may move the scores of an answer
  it is not in (BM25's statistics count only the items the caller's labels admit).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlite_cells import values

import runtime
from runtime.cli import cli
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.errors import StepRuntimeError
from runtime.format.pipeline import Pipeline
from runtime.retrieval.memories import SqliteMemoryStore
from runtime.retrieval.memory_io import import_seed_file

ROOT = Path(__file__).resolve().parents[2]
SEEDS = json.loads((ROOT / "pipelines" / "sample" / "eshop-memories.json").read_text())
KEY = "sk-live-9f8e7d6c5b4a3f2e1d0c"
NOW = datetime(2026, 3, 16, tzinfo=UTC)


# --- fuzzed seed files ----------------------------------------------------------------

_WRONG: list[Any] = [None, True, -1, 1.5, 1e309, "", " x", "x" * 30_000, [], {}, [[[]]], "\ud800"]


def _mutate(rng: random.Random, seeds: dict[str, Any]) -> bytes:
    data = copy.deepcopy(seeds)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["memories", "experiences"])
        item = rng.choice(data[kind])
        move = rng.random()
        key = rng.choice(sorted(item))
        if move < 0.35:
            del item[key]
        elif move < 0.8:
            item[key] = rng.choice(_WRONG)
        else:
            item[rng.choice(["colour", "labels", "scope", "provenance"])] = rng.choice(_WRONG)
    text = json.dumps(data, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    cut = rng.random()
    if cut < 0.1:
        text = text[: rng.randrange(len(text))]
    elif cut < 0.15:
        at = rng.randrange(len(text))
        text = text[:at] + b"\xff\xfe" + text[at:]
    elif cut < 0.2:
        text = b'{"memories": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    return text


def _fuzz(tmp_path: Path, cases: range) -> None:
    for case in cases:
        rng = random.Random(case)
        path = tmp_path / f"seed-{case}.json"
        path.write_bytes(_mutate(rng, SEEDS))
        db = tmp_path / f"m-{case}.db"
        store = SqliteMemoryStore(str(db), create=True, embedder=None)
        try:
            done = import_seed_file(store, str(path), now=NOW)
        except StepRuntimeError as exc:
            assert exc.code in ("MEMORY_INVALID", "MEMORY_UNLABELLED"), (case, exc)
            assert store.counts() == {"memory": 0, "experience": 0, "value": 0}, case
        else:
            assert store.counts()["memory"] == done["memories"], case
        db.unlink()


def test_fuzzed_seed_files_are_stored_whole_or_refused_with_a_code(tmp_path: Path) -> None:
    _fuzz(tmp_path, range(60))


@pytest.mark.slow
def test_many_more_fuzzed_seed_files(tmp_path: Path) -> None:
    _fuzz(tmp_path, range(60, 1560))


# --- secrets in every field -----------------------------------------------------------


def _file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def _everywhere(key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    memory = {
        "type": "semantic",
        "text": f"the key is {key}",
        "labels": [key],
        "scope": {"repository": key, "session": key},
        "provenance": {"source": key},
    }
    experience = {
        "domain": key,
        "strategy": key,
        "pipeline": key,
        "run_id": key,
        "error_code": key,
        "labels": [key],
        **{
            f: f"{f} {key}"
            for f in (
                "goal",
                "hypothesis",
                "action",
                "prediction",
                "outcome_result",
                "surprise",
                "lesson",
                "note",
            )
        },
        "outcome_status": "failure",
    }
    return memory, experience


def test_a_configured_key_in_every_field_reaches_no_byte_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    escaped = json.dumps(KEY)[1:-1].replace("k", "\\u006b")
    for form in (KEY, escaped):
        db = tmp_path / f"api-{len(form)}.db"
        memory, experience = _everywhere(form)
        runtime.remember([memory], store=str(db))
        runtime.record_experience([experience], store=str(db))
        assert KEY.encode() not in _file_bytes(db)
        [hit] = SqliteMemoryStore(str(db), embedder=None).search_memories(
            "key", limit=3, labels=frozenset({"[redacted]"})
        )
        assert "[redacted]" in hit.text
    # The seed file import and the remember action scrub as the API does.
    seeds = tmp_path / "seeds.json"
    memory, experience = _everywhere(KEY)
    seeds.write_text(json.dumps({"memories": [memory], "experiences": [experience]}))
    db = tmp_path / "cli.db"
    result = CliRunner().invoke(cli, ["memories", "import", str(seeds), "--memories", str(db)])
    assert result.exit_code == 0, result.output
    assert KEY.encode() not in _file_bytes(db)
    db = tmp_path / "action.db"
    steps = [
        {"id": "r", "action": "remember", "from": "notes", "labels": [], "next": "end"},
        {"id": "end", "action": "finalize", "source": "out"},
    ]
    settings = {"entry_step_id": "r", "memory_store": str(db)}
    result = Engine(
        Pipeline.from_dict({"settings": settings, "steps": steps}),
        services=Services(settings=settings),
    ).run({"out": "", "notes": [f"remember {KEY}", {"text": KEY, "labels": [KEY]}]})
    assert result.status == "completed", result.error
    assert KEY.encode() not in _file_bytes(db)


# --- damage, byte by byte ---------------------------------------------------------------

TABLES = ["memories", "experiences", "value_items"]
ALL = frozenset({"pci", "internal"})


def _build(path: Path) -> None:
    store = SqliteMemoryStore(str(path), create=True, embedder=None)
    store.remember(
        [
            {"type": "semantic", "text": "card numbers live in the vault", "labels": ["pci"]},
            {
                "type": "procedural",
                "text": "rotate vault keys monthly",
                "labels": [],
                "ttl_seconds": 86_400 * 30,
                "scope": {"repository": "shop"},
            },
            {
                "type": "episodic",
                "text": "the vault was down on monday",
                "labels": ["internal"],
                "half_life_days": 7,
            },
        ],
        now=NOW,
    )
    store.record_experiences(
        [
            {
                "domain": "payments",
                "strategy": "retry",
                "goal": "capture card payments through the vault",
                "outcome_status": "failure",
                "lesson": "retried vault writes need idempotency keys",
                "labels": ["pci"],
            },
            {
                "domain": "payments",
                "strategy": "retry",
                "goal": "refund card payments through the vault",
                "outcome_status": "success",
                "lesson": "vault writes retried with idempotency keys are safe",
                "labels": [],
            },
        ],
        now=NOW,
    )
    from runtime.retrieval.values import rebuild_values

    rebuild_values(store)
    store.conn().close()


def _answers(path: Path) -> list[Any]:
    store = SqliteMemoryStore(str(path), embedder=None)
    out: list[Any] = []
    for labels in (None, frozenset({"pci"}), ALL):
        for scope in (None, {"repository": "shop"}, {"repository": "crm"}):
            out.append(store.search_memories("vault", limit=5, labels=labels, scope=scope, now=NOW))
            out.append(store.search_memories("", limit=5, labels=labels, scope=scope, now=NOW))
        for axis in ("full", "root_cause"):
            out.append(store.search_experiences("vault", axis=axis, limit=5, labels=labels))
        out.append(
            store.search_experiences("", limit=5, labels=labels, filters={"domain": "payments"})
        )
        out.append(store.search_values("vault idempotency", limit=5, labels=labels))
    store.conn().close()
    return out


def _damage_all(tmp_path: Path, sample: int | None) -> tuple[int, list[str]]:
    clean = tmp_path / "clean.db"
    _build(clean)
    baseline = _answers(clean)
    found = values(clean, TABLES)
    assert {v.table for v in found} == set(TABLES)
    column = {o: v.column for v in found for o in v.offsets}
    offsets = sorted(column)
    if sample is not None:
        offsets = random.Random(7).sample(offsets, min(sample, len(offsets)))
    wrong: list[str] = []
    work = tmp_path / "work.db"
    for offset in offsets:
        shutil.copyfile(clean, work)
        data = bytearray(work.read_bytes())
        data[offset] ^= 0x5A
        work.write_bytes(bytes(data))
        try:
            got = _answers(work)
        except StepRuntimeError as exc:
            if exc.code != "MEMORY_STORE_ERROR":
                wrong.append(f"{offset}: {exc.code}")
            continue
        # A damaged labels cell of an item outside an answer may move the answer's scores
        # (BM25's statistics count the items a caller's labels admit); never its items.
        ranking_only = column[offset] == "labels"
        for before, after in zip(baseline, got, strict=True):
            shown = {r.id: r for r in before}
            for r in after:
                old = shown.get(r.id)
                same = old is not None and (
                    (old.text, dict(old.fields), old.labels) == (r.text, dict(r.fields), r.labels)
                    if ranking_only
                    else old == r
                )
                if not same:
                    wrong.append(f"{offset}: {r.id} answered changed or unseen before")
    return len(offsets), wrong


def test_damaged_values_are_an_error_or_the_same_answer(tmp_path: Path) -> None:
    edits, wrong = _damage_all(tmp_path, sample=200)
    assert edits >= 200
    assert not wrong, wrong[:10]


@pytest.mark.slow
def test_every_byte_of_every_stored_value(tmp_path: Path) -> None:
    edits, wrong = _damage_all(tmp_path, sample=None)
    assert edits > 2000
    assert not wrong, wrong[:10]
