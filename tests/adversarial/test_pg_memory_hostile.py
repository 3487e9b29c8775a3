"""Memories on Postgres under hostile input (issue 34): secrets in every field, rows
damaged with SQL, a URL's password.

- A configured key written into every field of a memory and an experience, through every
  writer (the embedding API, `runtime memories import`, the `remember` action), is in no
  row of any table of the database.
- A secret written into every field of a labelled memory stays with it: a caller without
  the label searching for the secret's words gets nothing of it, and the public items
  score exactly as they would if the labelled one were not there.
- Every cell of every row of the item tables, damaged with SQL one at a time (a character
  changed, NULL, another row's value, a number moved), gives MEMORY_STORE_ERROR or
  answers exactly what the undamaged store answered (an item may be hidden); an item is
  never shown changed, nor to a caller its stored labels do not allow. Damaged full-text
  rows (terms, lengths) may rank an answer differently, never show an item changed or
  to a caller its labels do not allow.
- A URL's password is in no error message, whether the server is down or the URL is bad.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import runtime
from runtime.cli import cli
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.errors import StepRuntimeError
from runtime.format.pipeline import Pipeline
from runtime.retrieval.memories import SqliteMemoryStore
from runtime.retrieval.pgmemories import PostgresMemoryStore

pytestmark = pytest.mark.postgres

KEY = "sk-live-9f8e7d6c5b4a3f2e1d0c"
NOW = datetime(2026, 3, 16, tzinfo=UTC)
ALL = frozenset({"pci", "internal"})


def _psql(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _database_text(url: str) -> str:
    """Every row of every table of the database, as text."""
    with _psql(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        ]
        parts = []
        for table in tables:
            for (row,) in conn.execute(f"SELECT t::text FROM {table} t"):
                parts.append(row)
    assert "memories" in tables and "memory_terms" in tables
    return "\n".join(parts)


def _everywhere(key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from tests.adversarial.test_memory_store_hostile import _everywhere as fields

    return fields(key)


def test_a_configured_key_in_every_field_reaches_no_row(
    pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    api = pg_server.create_database()
    memory, experience = _everywhere(KEY)
    runtime.remember([memory], store=api)
    runtime.record_experience([experience], store=api)
    text = _database_text(api)
    assert KEY not in text and "[redacted]" in text
    [hit] = PostgresMemoryStore(api).search_memories(
        "key", limit=3, labels=frozenset({"[redacted]"})
    )
    assert "[redacted]" in hit.text
    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps({"memories": [memory], "experiences": [experience]}))
    imported = pg_server.create_database()
    result = CliRunner().invoke(cli, ["memories", "import", str(seeds), "--memories", imported])
    assert result.exit_code == 0, result.output
    assert KEY not in _database_text(imported)
    acted = pg_server.create_database()
    steps = [
        {"id": "r", "action": "remember", "from": "notes", "labels": [], "next": "end"},
        {"id": "end", "action": "finalize", "source": "out"},
    ]
    settings = {"entry_step_id": "r", "memory_store": acted}
    result = Engine(
        Pipeline.from_dict({"settings": settings, "steps": steps}),
        services=Services(settings=settings),
    ).run({"out": "", "notes": [f"remember {KEY}", {"text": KEY, "labels": [KEY]}]})
    assert result.status == "completed", result.error
    assert KEY not in _database_text(acted)


def test_a_secret_in_a_labelled_memory_stays_with_it(pg_url: str, tmp_path: Path) -> None:
    secret = "zebraquartz"
    public = [
        {"type": "semantic", "text": f"note {i}: the vault opens at {i} o'clock", "labels": []}
        for i in range(12)
    ]
    hidden = {
        "type": "semantic",
        "text": f"the vault code is {secret} {secret}",
        "labels": ["pci"],
        "scope": {"repository": secret},
        "provenance": {"source": secret},
        "id": f"m-{secret}",
    }
    store = PostgresMemoryStore(pg_url, create=True)
    store.remember([*public, hidden], now=NOW)
    alone = SqliteMemoryStore(str(tmp_path / "public.db"), create=True)
    alone.remember(public, now=NOW)
    for query in (secret, f"vault {secret}", "vault code", ""):
        hits = store.search_memories(query, limit=20, now=NOW)
        assert all(secret not in json.dumps([h.text, dict(h.fields), h.id]) for h in hits)
        expected = alone.search_memories(query, limit=20, now=NOW)
        assert [(h.id, h.score) for h in hits] == [(h.id, h.score) for h in expected]
    cleared = store.search_memories(secret, limit=3, labels=frozenset({"pci"}), now=NOW)
    assert [h.id for h in cleared] == [f"m-{secret}"]


def test_a_password_in_the_url_is_in_no_message(pg_server: Any) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    password = "p4ss-" + KEY
    for url in (
        f"postgresql://bob:{password}@127.0.0.1:{port}/m",
        f"postgresql://bob:{password}@127.0.0.1:{pg_server.port}/nosuchdb",
        f"postgresql://bob:{password}@127.0.0.1:{pg_server.port}/m?sslmode=bogus",
    ):
        with pytest.raises(StepRuntimeError) as err:
            PostgresMemoryStore(url, create=True, timeout=1)
        assert password not in str(err.value) and password not in repr(err.value.__dict__)
        assert err.value.code in ("MEMORY_STORE_UNAVAILABLE", "STORE_URL_INVALID")
        result = CliRunner().invoke(cli, ["memories", "search", "vault", "--memories", url])
        assert result.exit_code != 0 and password not in result.output


# --- rows damaged with SQL ----------------------------------------------------------------

ITEM_TABLES = ("memories", "experiences", "value_items")
RANKING_ONLY = {("memory_terms", c) for c in ("term", "col", "tf", "kind", "item")}


def _build(url: str) -> None:
    """The SQLite damage test's store (memories of three label sets, a scoped one with a
    TTL, a decaying one; experiences; their values), in Postgres."""
    from runtime.retrieval.values import rebuild_values

    store = PostgresMemoryStore(url, create=True)
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
    rebuild_values(store)
    store.close()


def _answers(url: str) -> list[list[Any]]:
    store = PostgresMemoryStore(url)
    out: list[list[Any]] = []
    try:
        for labels in (None, frozenset({"pci"}), ALL):
            for scope in (None, {"repository": "crm"}):
                out.append(
                    store.search_memories("vault", limit=5, labels=labels, scope=scope, now=NOW)
                )
            out.append(store.search_memories("", limit=5, labels=labels, now=NOW))
            out.append(store.search_experiences("vault", axis="root_cause", limit=5, labels=labels))
            out.append(
                store.search_experiences("", limit=5, labels=labels, filters={"domain": "payments"})
            )
            out.append(store.search_values("vault idempotency", limit=5, labels=labels))
    finally:
        store.close()
    return out


def _cells(url: str) -> list[tuple[str, str, str, Any, list[Any]]]:
    """(table, column, row key SQL, value, damaged values) of every stored cell."""
    out = []
    with _psql(url) as conn:
        for table in (*ITEM_TABLES, "memory_terms"):
            cur = conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3")
            names = [d.name for d in cur.description]
            rows = cur.fetchall()
            if table == "memory_terms":
                rows = random.Random(3).sample(rows, min(12, len(rows)))
            for row in rows:
                if table == "memory_terms":
                    key = (
                        f"kind = '{row[0]}' AND term = '{row[1]}' AND item = {row[2]}"
                        f" AND col = {row[3]}"
                    )
                else:
                    key = f"rowid = {row[0]}"
                for i, (name, value) in enumerate(zip(names, row, strict=True)):
                    others = [r[i] for r in rows if r[i] != value]
                    out.append((table, name, key, value, _damaged(value, others)))
    return out


def _damaged(value: Any, others: list[Any]) -> list[Any]:
    out: list[Any] = [None, *others[:1]]
    if isinstance(value, str) and value:
        middle = len(value) // 2
        out.append(value[:middle] + ("x" if value[middle] != "x" else "y") + value[middle + 1 :])
    elif isinstance(value, list):
        out += [[], [*value, "pci"][:1] if value else ["internal"]]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out += [value + 1, -value, value * 1000]
    return out


def _damage_all(server: Any, sample: int | None) -> tuple[int, list[str]]:
    """Damage each cell in a fresh copy of one built database (CREATE DATABASE ... TEMPLATE)."""
    clean = server.create_database()
    _build(clean)
    baseline = _answers(clean)
    assert sum(len(a) for a in baseline) > 20
    edits = [(t, c, k, d) for t, c, k, v, ds in _cells(clean) for d in ds]
    if sample is not None:
        # every label cell cleared or given another row's labels (what decides who sees
        # an item), and a sample of the other damage
        labels = [e for e in edits if e[1] == "labels" and e[3] not in (None, ["internal"])]
        rest = [e for e in edits if e not in labels]
        edits = labels + random.Random(11).sample(rest, min(sample, len(rest)))
    wrong: list[str] = []
    done = 0
    template = clean.rsplit("/", 1)[1]
    for table, column, key, damaged in edits:
        work = server.create_database(template=template)
        try:
            with _psql(work) as conn:
                try:
                    conn.execute(f"UPDATE {table} SET {column} = %s WHERE {key}", (damaged,))
                except Exception:  # psycopg.Error: the database refuses this damage itself
                    continue
            done += 1
            try:
                got = _answers(work)
            except StepRuntimeError as exc:
                if exc.code != "MEMORY_STORE_ERROR":
                    wrong.append(f"{table}.{column}={damaged!r}: {exc.code}")
                continue
        finally:
            server.drop_database(work.rsplit("/", 1)[1])
        ranking_only = table == "memory_terms" or column == "length"
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
                    wrong.append(f"{table}.{column}={damaged!r}: {r.id} changed or unseen before")
    server.drop_database(template)
    return done, wrong


def test_damaged_rows_are_an_error_or_the_same_answer(pg_server: Any) -> None:
    edits, wrong = _damage_all(pg_server, sample=4)
    assert edits >= 15
    assert not wrong, wrong[:10]


@pytest.mark.slow
def test_every_damaged_cell(pg_server: Any) -> None:
    edits, wrong = _damage_all(pg_server, sample=None)
    assert edits > 250
    assert not wrong, wrong[:10]
