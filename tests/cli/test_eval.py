"""`runtime eval`: the shipped cases offline, positions in what the model saw, gates, reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runtime.cli import cli

ROOT = Path(__file__).resolve().parent.parent.parent
PIPELINE = str(ROOT / "pipelines" / "code_qa.yaml")
SAMPLE_CASES = str(ROOT / "pipelines" / "sample" / "eval.yaml")

SMALL = """\
repository: eshop
cases:
  - id: place-order
    question: Which stored procedure places an order?
    expect:
      evidence: [eshop::main::procedure::dbo.usp_PlaceOrder]
      facts: [usp_PlaceOrder, /never\\s+said/]
      answer_contains: usp_PlaceOrder
    distractors: [eshop::main::procedure::dbo.usp_CancelOrder, {auto: 3}]
    variants: {k: [6], position: [start, middle, end]}
  - id: payment-retries
    question: How many times is a payment capture retried?
    expect:
      # the table of customers does not answer it: the pipeline should not show it
      evidence: [eshop::main::method::Eshop.Core.Services.PaymentService.CaptureAsync,
                 eshop::main::table::dbo.Customers]
      facts: [MaxAttempts]
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from click.testing import CliRunner

    path = tmp_path_factory.mktemp("eval") / "index.db"
    sample = str(ROOT / "pipelines" / "sample" / "eshop")
    result = CliRunner().invoke(
        cli, ["index", sample, "--index", str(path), "--repository", "eshop"]
    )
    assert result.exit_code == 0, result.output
    return str(path)


def _reduced_sample(tmp_path: Path) -> str:
    """The shipped sample cases at one size and position: 8 runs instead of 48 (fast subset)."""
    import yaml

    doc = yaml.safe_load(Path(SAMPLE_CASES).read_text())
    doc["defaults"]["variants"] = {"k": [4], "position": ["start"]}
    doc["corpus"]["path"] = str(ROOT / "pipelines" / "sample" / "eshop")
    for case in doc["cases"]:
        case.pop("variants", None)
    path = tmp_path / "sample-reduced.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _eval(runner, tmp_path, index, *args: str):
    return runner.invoke(
        cli, ["eval", *args, "--index", index, "--store", str(tmp_path / "runs.db")]
    )


def _small(tmp_path: Path, text: str = SMALL) -> str:
    path = tmp_path / "cases.yaml"
    path.write_text(text)
    return str(path)


def _not_blank_png(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as img:
        assert img.format == "PNG"
        assert img.size[0] >= 300 and img.size[1] >= 200
        colours = img.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is not None and len(colours) > 10  # lines, text, not one flat colour


@pytest.mark.slow  # 48 runs; CI runs it (the "done when" command, as written)
def test_shipped_sample_cases_run_offline_and_write_every_output(runner, tmp_path, monkeypatch):
    # the command of docs/eval.md as written: no --index (the cases' corpus is indexed)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNTIME_INDEX", raising=False)
    monkeypatch.setenv("RUNTIME_STORE", str(tmp_path / "runs.db"))
    result = runner.invoke(cli, ["eval", PIPELINE, SAMPLE_CASES, "--out", "report/"])
    out = tmp_path / "report"
    assert result.exit_code == 0, result.output + result.stderr
    assert (tmp_path / ".runtime" / "eval" / "eshop.db").is_file()
    # the table: a row per case, then the aggregate
    for case in ("csharp-payment-retries", "sql-place-order", "cross-cancel-order"):
        assert case in result.stdout
    assert "aggregate over 48 runs" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["version"] == 1 and report["passed"] is True
    assert report["model"] == "extractive"  # no --model, no settings.default_model
    assert {r["position"] for r in report["runs"]} == {"start", "middle", "end"}
    assert {r["size"] for r in report["runs"]} == {4, 8}
    assert all(r["status"] == "completed" for r in report["runs"])
    # C#, SQL and cross-language cases, each measured
    assert report["cases"]["sql-place-order"]["evidence_recall"]["mean"] == 1.0
    assert set(report["curves"]["position"]) >= {"evidence_recall", "fact_coverage"}
    _not_blank_png(out / "context_rot.png")
    _not_blank_png(out / "position.png")
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "<script" not in page and "http://" not in page and "https://" not in page
    # drill-down: every run's context, by run id
    assert all(f"runtime context {r['run_id']}" in page for r in report["runs"])
    assert "<b><code>eshop::main::procedure::dbo.usp_PlaceOrder</code></b>" in page
    assert "wrote report.json, report.html, context_rot.png, position.png" in result.stderr


def test_tokens_variants_set_the_evidence_budget(runner, tmp_path, index):
    text = ONE + "    variants: {tokens: [200, 3000]}\n"
    res = _eval(runner, tmp_path, index, PIPELINE, _small(tmp_path, text), "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    small, large = report["runs"]
    assert (small["size"], large["size"], small["size_unit"]) == (200, 3000, "tokens")
    assert 0 < small["blocks"] < large["blocks"]  # 200 tokens hold fewer blocks
    assert report["curves"]["context_rot"]["unit"] == "tokens"
    assert [p[0] for p in report["curves"]["context_rot"]["points"]["evidence_recall"]] == [
        200,
        3000,
    ]


def _knowledge(runner, tmp_path, run_id):
    res = runner.invoke(cli, ["context", run_id, "--json", "--store", str(tmp_path / "runs.db")])
    assert res.exit_code == 0, res.output
    packs = json.loads(res.stdout)
    answer = [p for p in packs if p["step_id"] == "answer"][-1]
    section = next(s for s in answer["sections"] if s["type"] == "knowledge")
    return [i["id"] for i in section["items"] if not i["id"].startswith("user_parts.")]


def test_evidence_sits_where_the_variant_says_in_what_the_model_saw(runner, tmp_path, index):
    result = _eval(runner, tmp_path, index, PIPELINE, _small(tmp_path), "--json")
    assert result.exit_code == 0, result.output  # no threshold given: measured, not gated
    report = json.loads(result.stdout)
    runs = {r["variant"]: r for r in report["runs"] if r["case"] == "place-order"}
    evidence = "eshop::main::procedure::dbo.usp_PlaceOrder"
    seen = {v: _knowledge(runner, tmp_path, runs[v]["run_id"]) for v in runs}
    for v in ("k=6 start", "k=6 middle", "k=6 end"):
        assert len(seen[v]) == 6, seen[v]  # k blocks: the pipeline's, a distractor, padding
        assert "eshop::main::procedure::dbo.usp_CancelOrder" in seen[v]
    assert seen["k=6 start"].index(evidence) == 0
    assert seen["k=6 middle"].index(evidence) in (2, 3)
    assert seen["k=6 end"].index(evidence) == 5
    assert runs["k=6 start"]["evidence_positions"] == [0.0]
    assert runs["k=6 end"]["evidence_positions"] == [1.0]
    # the same blocks, only their order differs
    assert sorted(seen["k=6 start"]) == sorted(seen["k=6 end"]) == sorted(seen["k=6 middle"])


def test_thresholds_set_the_exit_code(runner, tmp_path, index):
    cases = _small(tmp_path)
    first = _eval(runner, tmp_path, index, PIPELINE, cases, "--json")
    assert first.exit_code == 0, first.output
    got = json.loads(first.stdout)["aggregate"]["evidence_recall"]["mean"]
    assert 0 < got < 1  # the customers table is never shown
    at = _eval(runner, tmp_path, index, PIPELINE, cases, "--min-evidence-recall", str(got))
    assert at.exit_code == 0, at.stderr  # equal to the minimum passes
    above = _eval(
        runner,
        tmp_path,
        index,
        PIPELINE,
        cases,
        "--min-evidence-recall",
        str(got + 0.001),
        "--json",
    )
    assert above.exit_code == 1
    assert "threshold: evidence_recall" in above.stderr
    report = json.loads(above.stdout)
    assert report["passed"] is False
    assert report["thresholds"]["evidence_recall"] == {"min": got + 0.001, "got": got, "ok": False}
    low = _eval(runner, tmp_path, index, PIPELINE, cases, "--min-fact-coverage", "0.99")
    assert low.exit_code == 1
    assert "threshold: fact_coverage" in low.stderr and "below the minimum 0.990" in low.stderr


def _weakened(tmp_path: Path) -> str:
    """code_qa with top_k 1, beside a copy of its prompts."""
    shutil.copytree(ROOT / "pipelines" / "prompts", tmp_path / "prompts")
    path = tmp_path / "weak.yaml"
    path.write_text(f"name: code_qa_weak\nextends: {PIPELINE}\nsettings: {{top_k: 1}}\n")
    return str(path)


def test_a_weakened_pipeline_against_the_baseline_exits_1_naming_the_cases(runner, tmp_path, index):
    base = tmp_path / "base"
    cases = _reduced_sample(tmp_path)
    first = _eval(runner, tmp_path, index, PIPELINE, cases, "--out", str(base))
    assert first.exit_code == 0, first.output
    # every output (the full 48-run sample: the slow test above)
    assert sorted(p.name for p in base.iterdir()) == [
        "context_rot.png", "position.png", "report.html", "report.json",
    ]  # fmt: skip
    _not_blank_png(base / "context_rot.png")
    _not_blank_png(base / "position.png")
    page = (base / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "<script" not in page
    again = _eval(runner, tmp_path, index, PIPELINE, cases, "--baseline", str(base / "report.json"))
    assert again.exit_code == 0 and "regression" not in again.stderr  # same pipeline: none
    weak = _eval(
        runner,
        tmp_path,
        index,
        _weakened(tmp_path),
        cases,
        "--baseline",
        str(base / "report.json"),
        "--json",
    )
    assert weak.exit_code == 1, weak.output
    lines = [x for x in weak.stderr.splitlines() if x.startswith("regression: ")]
    assert "regression: csharp-payment-retries: evidence_recall 1.000 -> 0.000 (-1.000)" in lines
    assert any(x.startswith("regression: (all): evidence_recall") for x in lines)
    report = json.loads(weak.stdout)
    named = {(r["case"], r["metric"]) for r in report["regressions"]}
    assert ("csharp-payment-retries", "evidence_recall") in named
    # a tolerance above the largest drop lets it pass
    tolerant = _eval(
        runner, tmp_path, index, _weakened_again(tmp_path), cases,
        "--baseline", str(base / "report.json"), "--tolerance", "1",
    )  # fmt: skip
    assert tolerant.exit_code == 0, tolerant.stderr


def _weakened_again(tmp_path: Path) -> str:
    return str(tmp_path / "weak.yaml")


def test_a_case_missing_from_the_run_is_a_note_against_the_baseline(runner, tmp_path, index):
    first = _eval(runner, tmp_path, index, PIPELINE, _small(tmp_path), "--json")
    base = tmp_path / "base.json"
    base.write_text(first.stdout)
    one_case = SMALL[: SMALL.index("  - id: payment-retries")]
    res = _eval(
        runner, tmp_path, index, PIPELINE, _small(tmp_path, one_case), "--baseline", str(base)
    )
    assert res.exit_code == 0, res.stderr
    assert "note: case payment-retries of the baseline was not run" in res.stderr


def test_a_baseline_that_is_not_a_report_is_a_usage_error(runner, tmp_path, index):
    bad = tmp_path / "b.json"
    bad.write_text('{"version": 99}')
    res = _eval(runner, tmp_path, index, PIPELINE, _small(tmp_path), "--baseline", str(bad))
    assert res.exit_code == 2
    assert "EVAL_BASELINE_INVALID" in res.stderr


def test_evidence_no_node_matches_is_refused_before_any_run(runner, tmp_path, index):
    text = SMALL.replace("dbo.usp_PlaceOrder]", "dbo.usp_NoSuchThing]")
    res = _eval(runner, tmp_path, index, PIPELINE, _small(tmp_path, text))
    assert res.exit_code == 2
    assert "EVAL_EVIDENCE_UNKNOWN" in res.stderr and "place-order" in res.stderr
    assert not (tmp_path / "runs.db").exists() or "completed" not in res.stdout


def test_hostile_strings_are_text_in_the_html(runner, tmp_path, index, chat_server):
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    chat_server.script = [
        {"reply": '{"decision": "retrieve", "query": "usp_PlaceOrder"}'},
        {"reply": '{"decision": "sufficient"}'},
        {"reply": f"usp_PlaceOrder {hostile} \"' &"},
    ]
    cases = tmp_path / "hostile.yaml"
    cases.write_text(
        "repository: eshop\ncases:\n"
        "  - id: x-1\n"
        f"    question: 'Which procedure places an order? {hostile}'\n"
        "    expect: {evidence: [eshop::main::procedure::dbo.usp_PlaceOrder], "
        f"facts: ['{hostile}']}}\n"
    )
    out = tmp_path / "o"
    res = _eval(
        runner, tmp_path, index, PIPELINE, str(cases), "--out", str(out),
        "--model", f"openai:test-model@{chat_server.url}",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    page = (out / "report.html").read_text()
    assert "<script" not in page and "onerror=alert" not in page.replace("onerror=alert(2)&gt;", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page


def _without_timing(report: dict) -> dict:
    """The report less what differs between two identical evaluations: run ids (which the
    prompts' run-context preamble names, so pack ids differ too) and wall time."""
    out = json.loads(json.dumps(report))
    for r in out["runs"]:
        r.pop("run_id"), r.pop("latency_s")
        for call in r["context"]:
            call.pop("pack_id")
    for s in [out["aggregate"], *out["cases"].values()]:
        s.pop("latency_s")
    return out


ONE = """\
repository: eshop
cases:
  - id: place-order
    question: Which stored procedure places an order?
    expect:
      evidence: [eshop::main::procedure::dbo.usp_PlaceOrder]
      facts: [usp_PlaceOrder, OrderLines, /never said/]
      answer_contains: [dbo.usp_PlaceOrder]
      max_tokens: 100000
    distractors: [{auto: 2}]
"""

SCRIPT = [
    {"reply": '{"decision": "retrieve", "query": "stored procedure places order"}'},
    {"reply": '{"decision": "sufficient"}'},
    {"reply": "dbo.usp_PlaceOrder inserts the order and its OrderLines."},
]


def test_end_to_end_against_an_openai_compatible_server(runner, tmp_path, index, chat_server):
    chat_server.script = list(SCRIPT)
    res = _eval(
        runner, tmp_path, index, PIPELINE, _small(tmp_path, ONE), "--json",
        "--model", f"openai:test-model@{chat_server.url}",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    run = json.loads(res.stdout)["runs"][0]
    assert len(chat_server.requests) == 3  # route, check, answer: each over HTTP
    # the answer request carried the evidence the run measured
    sent = chat_server.requests[2]["body"]["messages"][-1]["content"]
    assert "dbo.usp_PlaceOrder" in sent
    assert run["answer"] == "dbo.usp_PlaceOrder inserts the order and its OrderLines."
    assert run["fact_coverage"] == pytest.approx(2 / 3)  # /never said/ is not in it
    assert run["answer_contains"] == 1.0 and run["evidence_recall"] == 1.0
    assert run["model_calls"] == 3 and run["within_max_tokens"] == 1.0
    assert run["tokens_in"] > 0 and run["tokens_out"] > 0
    assert run["distractors_seen"] == 2


def test_a_cassette_makes_the_report_repeat_exactly(runner, tmp_path, index, chat_server):
    chat_server.script = list(SCRIPT)
    cassette = tmp_path / "qa.jsonl"
    rec = runner.invoke(
        cli,
        ["exec", PIPELINE, "--index", index, "--store", str(tmp_path / "rec.db"),
         "--model", f"openai:test-model@{chat_server.url}", "--record", str(cassette),
         "--input", "question=Which stored procedure places an order?"],
    )  # fmt: skip
    assert rec.exit_code == 0, rec.output
    cases = _small(tmp_path, ONE + "    variants: {k: [3, 6], position: [start, end]}\n")
    reports = []
    for jobs in ("1", "2"):
        res = _eval(
            runner, tmp_path, index, PIPELINE, cases, "--json", "--repeat", "2", "--jobs", jobs,
            "--model", f"replay:{cassette}",
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        reports.append(json.loads(res.stdout))
    a, b = (_without_timing(r) for r in reports)
    for x, y in zip(a["runs"], b["runs"], strict=True):
        assert x == y, [(k, x[k], y[k]) for k in x if x[k] != y[k]]
    assert a == b
    runs = reports[0]["runs"]
    assert len(runs) == 8 and {r["answer"] for r in runs} == {SCRIPT[2]["reply"]}
    # two repeats that agree: an interval of zero width
    assert reports[0]["aggregate"]["evidence_recall"]["ci95"] == [1.0, 1.0]
    assert len(chat_server.requests) == 3  # the replays made no request


def test_distractors_named_by_glob_then_the_nodes_most_like_the_evidence(index):
    from runtime.eval.cases import Case
    from runtime.eval.evidence import resolve_evidence, select_distractors
    from runtime.retrieval.node import Scope
    from runtime.retrieval.nodestore import open_store

    store, scope = open_store(index), Scope("eshop")
    evidence_id = "eshop::main::procedure::dbo.usp_PlaceOrder"
    case = Case(
        id="c",
        question="Which stored procedure places an order?",
        evidence=[evidence_id],
        distractors=[{"path": "Database/Tables/Orders.sql"}, {"auto": 3}],
    )
    evidence = resolve_evidence(store, scope, case)
    assert evidence == [{evidence_id}]  # a procedure: nothing holds it
    chosen, padding = select_distractors(store, scope, case, evidence, pad=2)
    in_file = sorted(
        r[0] for r in store.conn().execute(
            "SELECT id FROM nodes WHERE path = 'Database/Tables/Orders.sql'")
    )  # fmt: skip
    assert len(in_file) > 3 and chosen[: len(in_file)] == in_file
    auto = chosen[len(in_file) :]
    # the most similar: the first hits for the question and the evidence's name, less the
    # evidence and the distractors already named
    hits = store.search(f"{case.question} usp_PlaceOrder", scope=scope, top_k=40)
    rest = [h["id"] for h in hits if h["id"] != evidence_id and h["id"] not in in_file]
    assert auto == rest[:3] and padding == rest[3:5]
    assert evidence_id not in chosen + padding
    # a path without glob characters is a node id: matching none, it is refused
    from runtime.errors import UsageError

    case.distractors = ["Database/Tables/Orders.sql"]
    with pytest.raises(UsageError) as info:
        select_distractors(store, scope, case, evidence)
    assert info.value.code == "EVAL_EVIDENCE_UNKNOWN" and "{path: ...}" in info.value.message


def test_a_case_whose_inputs_the_pipeline_refuses_stops_everything_before_a_run(
    runner, tmp_path, index
):
    text = SMALL.replace(
        "  - id: payment-retries\n", "  - id: payment-retries\n    inputs: {colour: red}\n"
    )
    res = _eval(runner, tmp_path, index, PIPELINE, _small(tmp_path, text))
    assert res.exit_code == 2, res.output
    assert "case 'payment-retries'" in res.stderr and "colour" in res.stderr
    assert res.stdout == ""  # no table: no run was made


def test_a_corpus_repository_name_never_names_a_file_outside_runtime_eval(
    runner, tmp_path, monkeypatch
):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    sample = ROOT / "pipelines" / "sample" / "eshop"
    cases = work / "c.yaml"
    cases.write_text(
        f"corpus: {{path: {sample}, repository: ../../../escaped}}\n"
        "cases:\n  - {id: a, question: Which procedure places an order?, "
        "expect: {evidence: ['Database/Procedures/usp_PlaceOrder.sql']}}\n"
    )
    res = runner.invoke(cli, ["eval", "--retrieval", str(cases), "--modes", "bm25"])
    assert "Traceback" not in res.output + res.stderr
    assert not list(tmp_path.glob("**/escaped*.db")) or all(
        p.parent == work / ".runtime" / "eval" for p in tmp_path.glob("**/escaped*.db")
    )
    assert not (tmp_path / "escaped.db").exists() and not (tmp_path.parent / "escaped.db").exists()


@pytest.mark.postgres
def test_eval_reads_a_postgres_index_given_by_url(runner, tmp_path, index, pg_url):
    """`--index postgresql://...` as exec's: the same report as from the SQLite index."""
    from runtime.engine import indexcopy

    assert indexcopy.copy_index(index, pg_url).ok
    cases = _small(tmp_path)
    there = json.loads(_eval(runner, tmp_path / "pg", pg_url, PIPELINE, cases, "--json").output)
    here = json.loads(_eval(runner, tmp_path / "lite", index, PIPELINE, cases, "--json").output)
    measures = ("runs", "errors", "evidence_recall", "fact_coverage", "answer_contains")

    def quality(report: dict) -> dict:  # not the timings
        return {c: {m: v.get(m) for m in measures} for c, v in report["cases"].items()}

    assert quality(there) == quality(here) and len(quality(here)) >= 2
    assert there["runs"] and all(r["status"] == "completed" for r in there["runs"])
