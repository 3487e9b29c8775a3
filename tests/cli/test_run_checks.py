"""What `exec`, `resume`, `runs` and `trace` check before and after a run: --model, input
limits, the resume hint, missing and URL stores, the runs listing, exact prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import runtime.contract.registry as registry_module
from runtime.cli import cli
from runtime.contract.action import Action
from runtime.contract.registry import Registry
from runtime.engine.store import SqliteRunStore

ASK = """
name: ask
settings: {entry_step_id: ask}
inputs:
  question: string
steps:
  - id: ask
    action: call_model
    prompt_key: sys
    user_parts:
      q: {source: question, template: "Question: {}"}
    next: done
  - id: done
    action: finalize
    source: last_model_response
"""

# No `inputs:` declaration: any input is accepted, so only the limits refuse one.
FREE = """
name: free
settings: {entry_step_id: a}
steps:
  - id: a
    action: set_variables
    rules:
      - {set: answer, value: ok}
    next: b
  - id: b
    action: finalize
"""

LOOP = """
name: loop
settings: {entry_step_id: a, max_steps: 1000}
steps:
  - id: a
    action: json_decision_router
    routes: {stop: done}
    on_other: a
  - id: done
    action: finalize
"""

SYSTEM = "You answer from evidence.\nLine two: <b>&amp;</b>"
# What ask's model call sends as its system message (run q1): the default fidelity, compact,
# starts a fresh conversation: the prompt file, then the run's preamble (docs/fidelity.md).
SENT_SYSTEM = (
    SYSTEM + "\n\n## Run context\n- pipeline: ask (2 steps)\n- goal: (none given)\n"
    "### Now\n- run: q1\n- current step: ask (step 1)"
)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.md").write_text(SYSTEM + "\n")
    (tmp_path / "ask.yaml").write_text(ASK)
    (tmp_path / "free.yaml").write_text(FREE)
    (tmp_path / "loop.yaml").write_text(LOOP)
    return tmp_path


def exec_(runner, files: Path, *args: str, pipeline: str = "free.yaml"):
    return runner.invoke(
        cli, ["exec", str(files / pipeline), "--store", str(files / "runs.db"), *args]
    )


# --- --model is checked before the run --------------------------------------------------


def test_an_unknown_model_exits_2_before_any_run(runner, files):
    result = exec_(runner, files, "--input", "question=q", "--model", "nope", pipeline="ask.yaml")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "error: MODEL_UNKNOWN: --model: unknown model 'nope': not in settings.models (none defined)"
    )
    assert not (files / "runs.db").exists()  # no run was started, no step ran


def test_a_bad_model_spec_and_a_missing_cassette_exit_2(runner, files):
    bad = exec_(runner, files, "--model", "gpt:4")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: MODEL_CONFIG_INVALID: --model: ")
    missing = exec_(runner, files, "--model", f"replay:{files / 'none.jsonl'}")
    assert missing.exit_code == 2 and missing.stderr.startswith("error: CASSETTE_INVALID: ")
    assert not (files / "runs.db").exists()


def test_resume_checks_its_model_before_continuing(runner, files):
    failed = exec_(runner, files, "--run-id", "l1", "--max-steps", "2", pipeline="loop.yaml")
    assert failed.exit_code == 1
    result = runner.invoke(
        cli, ["resume", "l1", "--store", str(files / "runs.db"), "--model", "nope"]
    )
    assert result.exit_code == 2 and result.stderr.startswith("error: MODEL_UNKNOWN: --model: ")
    assert [e["type"] for e in SqliteRunStore(str(files / "runs.db")).events("l1")][-1] == (
        "RUN_FAILED"
    )


# --- input errors exit 2 without a run ----------------------------------------------------


def test_input_errors_exit_2_without_a_run(runner, files):
    unknown = exec_(runner, files, "--input", "question=q", "--input", "x=1", pipeline="ask.yaml")
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith("error: INPUT_UNKNOWN: unknown input(s) x; declared: question")
    (files / "in.json").write_text('{"question": 1}')
    mistyped = exec_(runner, files, "--inputs", str(files / "in.json"), pipeline="ask.yaml")
    assert mistyped.exit_code == 2
    assert mistyped.stderr.startswith("error: INPUT_TYPE: input 'question' must be string, got int")
    assert not (files / "runs.db").exists()


def test_an_unknown_input_gets_a_did_you_mean(runner, files):
    result = exec_(runner, files, "--input", "questoin=q", pipeline="ask.yaml")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: INPUT_UNKNOWN: unknown input(s) questoin; declared: question\n"
        "hint: did you mean 'question' for 'questoin'?\n"
    )
    # Only a name with a near declared one gets a suggestion; with none, no hint line.
    two = exec_(runner, files, "--input", "Question=q", "--input", "zzz=1", pipeline="ask.yaml")
    assert two.exit_code == 2
    assert two.stderr.splitlines()[1:] == ["hint: did you mean 'question' for 'Question'?"]
    # A name differing only in case is near too, however different difflib finds it.
    shout = exec_(runner, files, "--input", "QUESTION=q", pipeline="ask.yaml")
    assert shout.stderr.splitlines()[1:] == ["hint: did you mean 'question' for 'QUESTION'?"]
    far = exec_(runner, files, "--input", "question=q", "--input", "zzz=1", pipeline="ask.yaml")
    assert far.exit_code == 2
    assert far.stderr == "error: INPUT_UNKNOWN: unknown input(s) zzz; declared: question\n"


# --- --inputs / --input limits -------------------------------------------------------------


def test_a_100_mb_inputs_file_is_refused_by_its_size(runner, files):
    big = files / "big.json"
    with big.open("wb") as fh:
        fh.truncate(100 * 2**20)  # sparse: 100 MB by stat, nothing written
    result = exec_(runner, files, "--inputs", str(big))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"error: INPUT_TOO_LARGE: --inputs {big} is 104857600 bytes, "
        "over the 1048576-byte input limit"
    )
    assert not (files / "runs.db").exists()


def test_an_endless_inputs_device_stops_at_the_limit(runner, files):
    result = exec_(runner, files, "--inputs", "/dev/zero")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "error: INPUT_TOO_LARGE: --inputs /dev/zero is more than 1048576 bytes, "
        "over the 1048576-byte input limit"
    )


def test_the_size_limit_is_exact_and_configurable(runner, files):
    body = '{"q": "' + "a" * 91 + '"}'
    assert len(body) == 100
    (files / "in.json").write_text(body)
    at = exec_(runner, files, "--inputs", str(files / "in.json"), "--max-input-bytes", "100")
    assert at.exit_code == 0, at.stderr
    over = exec_(runner, files, "--inputs", str(files / "in.json"), "--max-input-bytes", "99")
    assert over.exit_code == 2 and over.stderr.startswith("error: INPUT_TOO_LARGE: ")
    pair = exec_(runner, files, "--input", "q=0123456789", "--max-input-bytes", "9")
    assert pair.exit_code == 2
    assert pair.stderr.splitlines()[0] == (
        "error: INPUT_TOO_LARGE: --input q (with the inputs before it) is 10 bytes, "
        "over the 9-byte input limit"
    )
    env = runner.invoke(
        cli,
        ["exec", str(files / "free.yaml"), "--store", str(files / "runs.db"), "--input", "q=xy"],
        env={"RUNTIME_MAX_INPUT_BYTES": "1"},
    )
    assert env.exit_code == 2 and env.stderr.startswith("error: INPUT_TOO_LARGE: ")
    [row] = SqliteRunStore(str(files / "runs.db")).runs()  # only the run within the limit
    assert row["status"] == "completed"


def nested(depth: int) -> str:
    """`{"q": [[...]]}`: an object holding lists, `depth` levels in all."""
    return '{"q": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


def test_json_100k_deep_is_refused_without_a_traceback(runner, files):
    (files / "deep.json").write_text(nested(100_000))
    result = exec_(runner, files, "--inputs", str(files / "deep.json"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"error: INPUT_TOO_DEEP: --inputs {files / 'deep.json'} nests arrays and objects "
        "more than 64 levels deep (the input depth limit)"
    )
    value = exec_(runner, files, "--input", "q=" + "[" * 100_000)  # unclosed, too
    assert value.exit_code == 2
    assert value.stderr.startswith("error: INPUT_TOO_DEEP: --input q nests ")


def test_the_depth_limit_is_exact_and_configurable(runner, files):
    (files / "64.json").write_text(nested(64))
    (files / "65.json").write_text(nested(65))
    assert exec_(runner, files, "--inputs", str(files / "64.json")).exit_code == 0
    assert exec_(runner, files, "--inputs", str(files / "65.json")).exit_code == 2
    # Brackets inside strings do not nest.
    (files / "text.json").write_text(json.dumps({"q": "[" * 1000}))
    assert exec_(runner, files, "--inputs", str(files / "text.json")).exit_code == 0
    low = exec_(runner, files, "--input", "q=[[1]]", "--max-input-depth", "1")
    assert low.exit_code == 2 and low.stderr.startswith("error: INPUT_TOO_DEEP: --input q ")
    env = runner.invoke(
        cli,
        ["exec", str(files / "free.yaml"), "--store", str(files / "r2.db"), "--input", "q=[[1]]"],
        env={"RUNTIME_MAX_INPUT_DEPTH": "1"},
    )
    assert env.exit_code == 2 and env.stderr.startswith("error: INPUT_TOO_DEEP: ")


# --- the resume hint only where resuming can help ------------------------------------------


class Boom(Action):
    """Raises: a bug in an action, fixed outside the pipeline."""

    name = "boom"
    runnable = True
    terminal = True

    def run(self, ctx):
        raise RuntimeError("disk on fire")


def test_the_resume_hint_only_where_resuming_can_help(runner, files, monkeypatch):
    # MAX_STEPS_EXCEEDED: the restored step count is over the limit again at once.
    result = exec_(runner, files, "--run-id", "l1", "--max-steps", "5", pipeline="loop.yaml")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == "[run l1 failed]"
    assert "resume" not in result.stderr
    # ACTION_FAILED: a bug in an action's code, fixed outside the pipeline; then resume.
    monkeypatch.setattr(registry_module, "_default", Registry.from_classes(Boom))
    (files / "boom.yaml").write_text(
        "settings: {entry_step_id: b}\nsteps:\n  - {id: b, action: boom}\n"
    )
    boom = exec_(runner, files, "--run-id", "b1", pipeline="boom.yaml")
    assert boom.exit_code == 1
    assert boom.stderr.splitlines()[-1] == (
        f"[run b1 failed; resume with: runtime resume b1 --store {files / 'runs.db'}]"
    )


# --- reading commands refuse a missing store; URLs are refused ----------------------------


@pytest.mark.parametrize(
    "args", [["runs"], ["trace", "r1"], ["resume", "r1"]], ids=["runs", "trace", "resume"]
)
def test_reading_commands_refuse_a_missing_store(runner, files, args):
    store = files / "typo.db"
    result = runner.invoke(cli, [*args, "--store", str(store)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: STORE_NOT_FOUND: no run store at {store}",
        "hint: Check the path; only `runtime exec` creates a run store.",
    ]
    assert not store.exists()


URL = "postgresql://admin:s3cret@127.0.0.1:1/runs"


@pytest.mark.parametrize(
    "args",
    [
        ["index", "{dir}/prompts", "--index", URL],
        ["search", "orders", "--index", URL],
    ],
    ids=["index", "search"],
)
def test_index_urls_name_postgres_and_create_nothing_here(runner, files, monkeypatch, args):
    # index and search take a Postgres index by URL (issue 34); nothing listens here
    monkeypatch.chdir(files)
    before = sorted(p.name for p in files.iterdir())
    result = runner.invoke(cli, [a.replace("{dir}", str(files)) for a in args])
    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(
        "error: INDEX_UNAVAILABLE: index postgresql://admin:***@127.0.0.1:1/runs: "
        "the database is unavailable: "
    )
    assert "s3cret" not in result.stderr and "Traceback" not in result.output
    assert sorted(p.name for p in files.iterdir()) == before


def test_a_postgres_index_that_cannot_be_reached_is_coded_and_hides_its_password(runner, tmp_path):
    # a run searches a Postgres index by URL (docs/retrieval.md); nothing listens here
    root = Path(__file__).resolve().parents[2]
    url = "postgresql://admin:s3cret@127.0.0.1:1/index"
    result = runner.invoke(
        cli,
        [
            "exec",
            str(root / "pipelines" / "code_qa.yaml"),
            "--index",
            url,
            "--store",
            str(tmp_path / "r.db"),
            "--input",
            "question=Where are orders placed?",
        ],
    )
    assert result.exit_code == 1
    assert "INDEX_UNAVAILABLE" in result.output
    assert "s3cret" not in result.output
    assert "Traceback" not in result.output


# --- runs: a header and filters --------------------------------------------------------------


def test_runs_has_a_header_and_filters(runner, files):
    for rid in ("f1", "f2"):
        assert exec_(runner, files, "--run-id", rid).exit_code == 0
    assert (
        exec_(runner, files, "--run-id", "l1", "--max-steps", "3", pipeline="loop.yaml").exit_code
        == 1
    )
    store = ["--store", str(files / "runs.db")]
    listed = runner.invoke(cli, ["runs", *store])
    assert listed.exit_code == 0
    header, *rows = listed.stdout.splitlines()
    assert header.split() == [
        "RUN",
        "ID",
        "STATUS",
        "STARTED",
        "SECONDS",
        "STEPS",
        "PIPELINE",
        "MODEL",
        "ERROR",
    ]
    assert [r.split()[:2] for r in rows] == [
        ["l1", "failed"],
        ["f2", "completed"],
        ["f1", "completed"],
    ]
    assert rows[0].split()[-4:] == ["3", "loop", "extractive", "MAX_STEPS_EXCEEDED"]
    failed = runner.invoke(cli, ["runs", *store, "--status", "failed"])
    assert [r.split()[0] for r in failed.stdout.splitlines()[1:]] == ["l1"]
    free = runner.invoke(cli, ["runs", *store, "--pipeline", "free", "--json"])
    assert [r["run_id"] for r in json.loads(free.stdout)] == ["f2", "f1"]
    both = runner.invoke(cli, ["runs", *store, "--pipeline", "free", "--status", "failed"])
    assert both.exit_code == 0 and both.stdout == ""
    assert both.stderr == f"no runs match --status failed --pipeline free in {files / 'runs.db'}\n"
    bad = runner.invoke(cli, ["runs", *store, "--status", "done"])
    assert bad.exit_code == 2


# --- trace: one step, the exact messages, whole values -------------------------------------


QUESTION = "what writes <OrderLines> & why?\n" + "x" * 150


@pytest.fixture
def asked(runner, files) -> list[str]:
    done = exec_(
        runner, files, "--run-id", "q1", "--input", f"question={QUESTION}", pipeline="ask.yaml"
    )
    assert done.exit_code == 0, done.stderr
    return ["--store", str(files / "runs.db")]


def test_trace_messages_prints_the_exact_prompt(runner, files, asked):
    [call] = [e for e in SqliteRunStore(asked[1]).events("q1") if e["type"] == "MODEL_CALL"]
    result = runner.invoke(cli, ["trace", "q1", *asked, "--step", "ask", "--messages"])
    assert result.exit_code == 0
    assert result.stdout == (
        f"=== ask: model call 1 of 1 (event {call['seq']}, model extractive, "
        f"prompt tokens {call['prompt_tokens']}) ===\n"
        "--- message 1: system ---\n"
        f"{SENT_SYSTEM}\n"
        "--- message 2: user ---\n"
        f"Question: {QUESTION}\n"
    )
    lines = runner.invoke(cli, ["trace", "q1", *asked, "--messages", "--format", "jsonl"])
    assert [json.loads(x) for x in lines.stdout.splitlines()] == [
        {
            "run_id": "q1",
            "seq": call["seq"],
            "step_id": "ask",
            "model": "extractive",
            "messages": [
                {"role": "system", "content": SENT_SYSTEM},
                {"role": "user", "content": f"Question: {QUESTION}"},
            ],
        }
    ]


def test_trace_step_and_full(runner, files, asked):
    step = runner.invoke(cli, ["trace", "q1", *asked, "--step", "done", "--format", "jsonl"])
    assert [(e["type"], e["step_id"]) for e in map(json.loads, step.stdout.splitlines())] == [
        ("STEP", "done")
    ]
    whole = json.dumps(
        [
            {"role": "system", "content": SENT_SYSTEM},
            {"role": "user", "content": f"Question: {QUESTION}"},
        ]
    )
    full = runner.invoke(cli, ["trace", "q1", *asked, "--full"])
    assert full.exit_code == 0 and f"messages={whole}" in full.stdout
    short = runner.invoke(cli, ["trace", "q1", *asked])
    # Cut at 80 characters, then the next field or the end of the line.
    assert re.search(re.escape(f"messages={whole[:80]}") + "[ \n]", short.stdout)
    assert whole not in short.stdout


def test_trace_step_and_messages_refuse_what_is_not_there(runner, files, asked):
    unknown = runner.invoke(cli, ["trace", "q1", *asked, "--step", "akk"])
    assert unknown.exit_code == 2
    assert unknown.stderr == (
        "error: USAGE: run q1: step 'akk' did not run; steps that ran: ask, done; "
        "did you mean 'ask'?\n"
    )
    none = runner.invoke(cli, ["trace", "q1", *asked, "--step", "done", "--messages"])
    assert none.exit_code == 2
    assert none.stderr == "error: USAGE: run q1: step 'done' made no model call\n"
