"""runtime memories import/search, runtime feedback, runtime values rebuild; the eShop seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import cli
from runtime.retrieval.memories import SqliteMemoryStore
from runtime.retrieval.values import build_values, term_vectors

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "pipelines" / "sample" / "eshop-memories.json"

TINY = """\
name: tiny_qa
inputs:
  question: string
  allowed_labels: {type: array, required: false}
settings:
  entry_step_id: answer
steps:
  - id: answer
    action: set_variables
    rules:
      - {set: answer, from: question}
    next: done
  - id: done
    action: finalize
    source: answer
"""


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_seeds_import_and_are_found(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    code, out, err = invoke("memories", "import", str(SEEDS), "--memories", db, "--json")
    assert code == 0, err
    assert json.loads(out) == {"memories": 14, "experiences": 15}
    code, out, _ = invoke(
        "memories", "search", "shortage check never throws", "--memories", db, "--json"
    )
    hits = json.loads(out)
    assert hits[0]["id"] == "mem-stock-check-does-not-abort"
    # Labelled seeds stay hidden without their label; the expired one is never shown.
    code, out, _ = invoke("memories", "search", "payment retries charge twice", "--memories", db)
    assert "mem-payment-retries" not in out
    code, out, _ = invoke(
        "memories", "search", "payment retries", "--memories", db, "--label", "internal"
    )
    assert "memory:mem-payment-retries" in out
    code, out, _ = invoke("memories", "search", "deploy freeze", "--memories", db)
    assert "mem-deploy-freeze" not in out
    code, out, _ = invoke(
        "memories",
        "search",
        "stock",
        "--kind",
        "experiences",
        "--axis",
        "root_cause",
        "--filter",
        "domain=inventory",
        "--memories",
        db,
        "--json",
    )
    assert {h["fields"]["domain"] for h in json.loads(out)} == {"inventory"}


def test_a_bad_seed_file_stores_nothing(tmp_path: Path) -> None:
    seeds = json.loads(SEEDS.read_text())
    seeds["experiences"][3]["confidence_tier"] = "platinum"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(seeds))
    db = tmp_path / "m.db"
    code, _, err = invoke("memories", "import", str(bad), "--memories", str(db))
    assert code == 1
    assert "MEMORY_INVALID" in err and "experience 4 field 'confidence_tier'" in err
    assert SqliteMemoryStore(str(db)).counts() == {"memory": 0, "experience": 0, "value": 0}


def test_json_lines_seeds(tmp_path: Path) -> None:
    lines = tmp_path / "seeds.jsonl"
    lines.write_text(
        json.dumps({"memory": {"type": "semantic", "text": "one", "labels": []}})
        + "\n\n"
        + json.dumps(
            {
                "experience": {
                    "domain": "d",
                    "strategy": "s",
                    "goal": "g",
                    "outcome_status": "success",
                    "labels": [],
                }
            }
        )
        + "\n"
    )
    code, out, err = invoke("memories", "import", str(lines), "--memories", str(tmp_path / "m.db"))
    assert code == 0, err
    assert "stored 1 memory(ies) and 1 experience(s)" in out


def test_values_rebuild_clusters_the_seed_lessons(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    invoke("memories", "import", str(SEEDS), "--memories", db)
    code, out, err = invoke("values", "rebuild", "--memories", db, "--json")
    assert code == 0, err
    assert json.loads(out) == {"values": 2, "experiences": 15, "method": "terms"}
    store = SqliteMemoryStore(db, embedder=None)
    [idem] = store.search_values("idempotency key retry", limit=3, labels=frozenset({"internal"}))
    assert idem.fields["axis"] == "lesson" and idem.fields["cluster_size"] == 3
    assert idem.fields["members"] == [
        "exp-basket-retry-idempotent",
        "exp-order-retry-deadlock",
        "exp-payment-retry-double-charge",
    ]
    # Drawn from an internal experience: as restricted as it.
    assert idem.labels == {"internal"}
    assert store.search_values("idempotency key retry", limit=3) == []
    [tx] = store.search_values("same transaction", limit=3)
    assert tx.fields["cluster_size"] == 3 and 0 < tx.fields["similarity_to_centroid"] <= 1
    # Abandoned experiences are left out of every cluster.
    everything = [v for v in store.search_values("", limit=50, labels=frozenset({"internal"}))]
    assert all("exp-ef-savechanges-order" not in v.fields["members"] for v in everything)


def test_values_are_deterministic() -> None:
    seeds = json.loads(SEEDS.read_text())["experiences"]
    first = build_values(seeds)
    assert build_values(list(reversed(seeds))) == first
    assert build_values(seeds) == first
    assert [v["cluster_size"] for v in first] == [3, 3]


def test_term_vectors_are_unit_length_and_share_stems() -> None:
    a, b, c = term_vectors(["retries need keys", "a retried write needs a key", "stock"])
    assert sum(v * v for v in a.values()) == pytest.approx(1.0)
    assert set(a) & set(b) and not set(a) & set(c)


def test_feedback_records_a_run_and_sets_its_tier(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(TINY)
    runs = str(tmp_path / "runs.db")
    db = str(tmp_path / "m.db")
    code, out, err = invoke(
        "exec",
        str(pipeline),
        "--input",
        "question=Which procedure cancels orders?",
        "--store",
        runs,
        "--json",
    )
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    code, out, err = invoke(
        "feedback", run_id, "--good", "--note", "right", "--store", runs, "--memories", db, "--json"
    )
    assert code == 0, err
    assert json.loads(out) == {"id": f"run-{run_id}", "tier": "gold", "recorded": True}
    store = SqliteMemoryStore(db, embedder=None)
    [hit] = store.search_experiences("cancels orders", limit=3, filters={"pipeline": "tiny_qa"})
    assert hit.fields["goal"] == "Which procedure cancels orders?"
    assert hit.fields["outcome_status"] == "success" and hit.fields["note"] == "right"
    assert hit.fields["outcome_result"] == "Which procedure cancels orders?"
    code, out, _ = invoke("feedback", run_id, "--bad", "--store", runs, "--memories", db, "--json")
    assert json.loads(out)["recorded"] is False
    [hit] = store.search_experiences("cancels orders", limit=3)
    assert hit.fields["confidence_tier"] == "abandoned"
    code, out, _ = invoke(
        "feedback", run_id, "--tier", "silver", "--store", runs, "--memories", db, "--json"
    )
    assert json.loads(out)["tier"] == "silver"


def test_a_run_that_could_read_labels_is_recorded_with_them(tmp_path: Path) -> None:
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(TINY)
    runs = str(tmp_path / "runs.db")
    db = str(tmp_path / "m.db")
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"question": "card vault?", "allowed_labels": ["pci"]}))
    code, out, err = invoke(
        "exec", str(pipeline), "--inputs", str(inputs), "--store", runs, "--json"
    )
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    invoke("feedback", run_id, "--good", "--store", runs, "--memories", db)
    store = SqliteMemoryStore(db, embedder=None)
    assert store.search_experiences("card vault", limit=3) == []
    [hit] = store.search_experiences("card vault", limit=3, labels=frozenset({"pci"}))
    assert hit.labels == {"pci"}


def test_feedback_answers_with_codes(tmp_path: Path) -> None:
    runs = tmp_path / "runs.db"
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(TINY)
    invoke("exec", str(pipeline), "--input", "question=q", "--store", str(runs))
    db = str(tmp_path / "m.db")
    code, _, err = invoke("feedback", "nope", "--good", "--store", str(runs), "--memories", db)
    assert code == 1 and "EXPERIENCE_NOT_FOUND" in err
    code, _, err = invoke("feedback", "nope", "--store", str(runs), "--memories", db)
    assert code == 2 and "--good" in err


class ConceptEmbedder:
    """Vectors by concept: 'idempotency' lessons one way, everything else another."""

    name = "concepts-2"

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.1] if "idempotency" in t else [0.1, 1.0] for t in texts]


def test_values_use_the_embedders_vectors_when_there_is_one() -> None:
    seeds = json.loads(SEEDS.read_text())["experiences"]
    found = build_values(seeds, embedder=ConceptEmbedder())
    assert found == build_values(list(reversed(seeds)), embedder=ConceptEmbedder())
    idem = [v for v in found if v["axis"] == "lesson" and "idempotency" in v["text"]]
    assert [v["members"] for v in idem] == [
        [
            "exp-basket-retry-idempotent",
            "exp-order-retry-deadlock",
            "exp-payment-retry-double-charge",
        ]
    ]
    assert {v["method"] for v in found} == {"concepts-2"}
