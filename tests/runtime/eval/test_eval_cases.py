"""Cases files: what loads, and every problem at its file:line with CASES_INVALID."""

from __future__ import annotations

import json

import pytest

from runtime.cli import cli
from runtime.eval.cases import CasesInvalidError, Variant, load_cases

GOOD = """\
repository: eshop
defaults:
  variants: {k: [2, 8], position: [start, end]}
cases:
  - id: a
    question: Which stored procedure places an order?
    expect: {evidence: ["Database/*.sql", {kind: procedure, name: dbo.usp_PlaceOrder}], facts: [x, /y+/i]}
  - id: b
    question: Who writes the audit trail?
    variants: {tokens: [500], seeds: [1, 2]}
"""


def _problems(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CasesInvalidError) as info:
        load_cases(str(path))
    return [(d.line, d.column, d.code, d.message) for d in info.value.diagnostics]


def test_a_good_file_loads_with_defaults_and_the_variant_product(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    cf = load_cases(str(path))
    a, b = cf.cases
    assert cf.repository == "eshop"
    assert [v.id for v in a.variants] == ["k=2 start", "k=2 end", "k=8 start", "k=8 end"]
    assert b.variants == [Variant(tokens=500, seed=1), Variant(tokens=500, seed=2)]
    assert a.evidence == ["Database/*.sql", {"kind": "procedure", "name": "dbo.usp_PlaceOrder"}]
    assert a.facts[1].found("YYY") and not a.facts[0].found("y")
    assert (a.line, b.line) == (5, 8)
    assert a.answers and not b.answers and Variant().id == "default"


@pytest.mark.parametrize(
    ("text", "where", "needle"),
    [
        ("cases:\n  - id: a\n    question: q\n    expect: {factz: [x]}\n", (4, 13), "factz"),
        ("cases:\n  - id: a\n    question: 3\n", (3, 15), "is not of type 'string'"),
        ("cases:\n  - {id: a, question: q}\n  - {id: a, question: r}\n", (3, 10), "used twice"),
        (
            "cases:\n  - id: a\n    question: q\n    expect: {facts: ['/(/']}\n",
            (4, 22),
            "invalid regex",
        ),
        (
            "cases:\n  - id: a\n    question: q\n    variants: {k: [1], tokens: [9]}\n",
            (4, 24),
            "k or tokens, not both",
        ),
        ("cases:\n  - id: a\n    question: q\n    variants: {position: [top]}\n", (4, 27), "top"),
        ("- id: 'bad id'\n  question: q\n", (1, 7), "does not match"),
        (
            "cases:\n  - id: a\n    question: q\n    distractors: [{auto: 0}]\n",
            (4, 26),
            "minimum of 1",
        ),
        (
            "corpus: {path: ./nowhere}\ncases:\n  - {id: a, question: q}\n",
            (1, 16),
            "does not exist",
        ),
        ("cases: []\n", (1, 8), "should be non-empty"),
        ("cases:\n  - id: a\n  question: q\n", (3, 3), ""),  # YAML syntax
        ("a: 1\na: 2\n", (2, 1), ""),  # duplicate key
        ("", (1, 1), ""),
    ],
)
def test_each_problem_is_coded_at_its_line(tmp_path, text, where, needle):
    found = _problems(tmp_path, text)
    assert found, text
    line, column, code, message = found[0]
    assert (line, column) == where, found
    assert code in ("CASES_INVALID", "YAML_SYNTAX", "YAML_DUPLICATE_KEY"), found
    assert needle in message, found


def test_every_problem_at_once(tmp_path):
    text = (
        "cases:\n"
        "  - {id: a, question: q, expect: {facts: ['/(/']}}\n"
        "  - {id: a, question: r, variants: {k: [1], tokens: [2]}}\n"
    )
    found = _problems(tmp_path, text)
    assert [(f[0], f[2]) for f in found] == [
        (2, "CASES_INVALID"),
        (3, "CASES_INVALID"),
        (3, "CASES_INVALID"),
    ]


def test_the_cli_prints_positions_and_exits_2(runner, tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("cases:\n  - id: a\n    question: q\n    expect: {factz: [x]}\n")
    res = runner.invoke(cli, ["eval", "--retrieval", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:4:13: error CASES_INVALID" in res.stderr
    assert "Traceback" not in res.output + res.stderr


def test_schema_cases_is_the_checked_in_file(runner):
    from pathlib import Path

    res = runner.invoke(cli, ["schema", "--cases"])
    assert res.exit_code == 0
    root = Path(__file__).resolve().parents[3]
    assert res.stdout == (root / "schemas" / "cases.schema.json").read_text()
    assert json.loads(res.stdout)["$schema"].endswith("2020-12/schema")


def test_the_examples_in_docs_eval_md_load(tmp_path):
    import re
    from pathlib import Path

    import yaml

    doc = (Path(__file__).resolve().parents[3] / "docs" / "eval.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    cases = next(b for b in blocks if "cases:" in b)
    (tmp_path / "eshop").mkdir()
    path = tmp_path / "cases.yaml"
    path.write_text(cases)
    loaded = load_cases(str(path))
    assert [c.id for c in loaded.cases] == ["sql-place-order"]
    assert len(loaded.cases[0].variants) == 3 * 4 * 2
    workflow = yaml.safe_load(next(b for b in blocks if "jobs:" in b))
    run = " ".join(s.get("run", "") for s in workflow["jobs"]["eval"]["steps"])
    assert "runtime eval pipelines/code_qa.yaml pipelines/sample/eval.yaml --out report/" in run
