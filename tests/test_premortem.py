"""pipelines/premortem.yaml end to end: the sample indexed, the seeded memories and experiences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "pipelines" / "sample" / "eshop-memories.json"
SECTIONS = (
    "Common failures",
    "How each strategy performed",
    "Unexpected outcomes",
    "Root causes to watch",
    "Relevant values",
)

pytestmark = pytest.mark.skipif(
    not SEED.is_file(), reason="the seeded memories (issue 27, the stores half) are not here yet"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from runtime.retrieval.memories import SqliteMemoryStore

    path = tmp_path_factory.mktemp("premortem")
    result = CliRunner().invoke(
        cli,
        [
            "index",
            str(ROOT / "pipelines/sample/eshop"),
            "--index",
            str(path / "index.db"),
            "--repository",
            "eshop",
        ],
    )
    assert result.exit_code == 0, result.output
    seed = json.loads(SEED.read_text())
    store = SqliteMemoryStore(str(path / "memories.db"), create=True, embedder=None)
    store.remember(seed["memories"])
    store.record_experiences(seed["experiences"])
    return path


def test_premortem_prints_five_sections_within_budget_with_cuts_and_drops(folder):
    args = [
        "exec",
        str(ROOT / "pipelines/premortem.yaml"),
        "--index",
        str(folder / "index.db"),
        "--store",
        str(folder / "runs.db"),
        "--input",
        "domain=payments",
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for title in SECTIONS:
        assert f"## {title} (" in out, title
    assert "[cut to fit: " in out and "the whole text: experience:" in out
    assert "Dropped:\n- " in out and "): over budget" in out
    as_json = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    record = json.loads(as_json.stdout)["state"]["premortem"]
    assert record["token_count"] <= 1400 and record["exceeded"] == 0
    ids = [i["id"] for i in record["items"]]
    assert len(ids) == len(set(ids))
    assert {"experience", "memory", "code"} <= {
        i["kind"].replace("facet", "experience") for i in record["items"]
    }
