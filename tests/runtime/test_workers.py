"""Workers on a Postgres store (issue 34): submit, work, a worker SIGKILLed or SIGSTOPped.

Real processes: `runtime submit` and `runtime worker` against a real PostgreSQL the tests
start. A worker is killed (or paused) at a chosen checkpoint with STEP_RUNTIME_KILL_AT
(runtime/engine/faults.py); the lease is 2 s here ($RUNTIME_WORKER_LEASE).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runtime.engine import Engine, workers
from runtime.engine.stores import open_run_store
from runtime.format.validation import load_pipeline

pytestmark = pytest.mark.postgres
RUNTIME = str(Path(sys.executable).parent / "runtime")
STEPS = 8


def _pipeline(folder: Path) -> str:
    lines = ["name: chain", "settings: {entry_step_id: s1}", "steps:"]
    for i in range(1, STEPS + 1):
        nxt = f"s{i + 1}" if i < STEPS else "done"
        lines += [
            f"  - id: s{i}",
            "    action: set_variables",
            "    rules:",
            f"      - {{set: v{i}, value: {i * i}}}",
            f"    next: {nxt}",
        ]
    lines += ["  - id: done", "    action: finalize"]
    path = folder / "chain.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "RUNTIME_WORKER_LEASE": "2", **extra}


def _worker(url: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [RUNTIME, "worker", "--store", url, *args],
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _stop(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
    out, _ = proc.communicate(timeout=60)
    return _SEEN.get(proc.pid, "") + (out or b"").decode(errors="replace")


def _reference(pipe: str) -> dict[str, Any]:
    done = Engine(load_pipeline(pipe)).run({}, run_id="ref")
    assert done.status == "completed"
    return dict(done.state)


def _runs(url: str) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [RUNTIME, "runs", "--store", url, "--json"], capture_output=True, text=True, env=_env()
    )
    assert out.returncode == 0, out.stderr
    return {r["run_id"]: r for r in json.loads(out.stdout)}


def test_submitted_runs_are_queued_then_run_by_a_worker(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    ids = []
    for _ in range(3):
        done = subprocess.run(
            [RUNTIME, "submit", pipe, "--store", pg_url], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    assert len(set(ids)) == 3
    assert {r["status"] for r in _runs(pg_url).values()} == {"queued"}
    text = subprocess.run(
        [RUNTIME, "runs", "--store", pg_url, "--status", "queued"], capture_output=True, text=True
    )
    assert text.returncode == 0 and text.stdout.count(" queued ") == 3, text.stdout
    worker = _worker(pg_url, "--concurrency", "2")
    try:
        for run_id in ids:
            row = workers.wait(pg_url, run_id, timeout=120)
            assert row["status"] == "completed", row
    finally:
        _stop(worker)
    listed = _runs(pg_url)
    assert {listed[i]["status"] for i in ids} == {"completed"}
    store = open_run_store(pg_url)
    reference = _reference(pipe)
    for run_id in ids:
        assert store.load(run_id)["variables"] == reference
        assert [e["type"] for e in store.events(run_id)][-1] == "RUN_COMPLETED"


def test_a_bad_submission_is_refused_before_it_is_queued(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    done = subprocess.run(
        [RUNTIME, "submit", pipe, "--store", str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "STORE_URL_UNSUPPORTED" in done.stderr
    (tmp_path / "bad.yaml").write_text("name: bad\nsteps: []\n")
    done = subprocess.run(
        [RUNTIME, "submit", str(tmp_path / "bad.yaml"), "--store", pg_url],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr


def _wait_stopped(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        assert proc.poll() is None, _stop(proc)
        time.sleep(0.05)
    raise AssertionError("the worker never paused")


@pytest.mark.slow  # two worker processes and a 2 s lease (the fast subset has the fence test)
def test_a_sigkilled_workers_run_is_resumed_by_another_from_its_checkpoint(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    reference = _reference(pipe)
    run_id = workers.submit(pg_url, pipe, {})
    doomed = _worker(pg_url, STEP_RUNTIME_KILL_AT="checkpoint:4")
    doomed.communicate(timeout=120)
    assert doomed.returncode == -signal.SIGKILL
    store = open_run_store(pg_url)
    assert store.load(run_id)["engine"]["step_trace"] == ["s1", "s2", "s3"]
    other = _worker(pg_url)
    try:
        row = workers.wait(pg_url, run_id, timeout=120)
    finally:
        _stop(other)
    assert row["status"] == "completed"
    assert store.load(run_id)["variables"] == reference
    events = store.events(run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events].count("RUN_RESUMED") == 1
    assert store.verify_ledger(run_id, None).ok


@pytest.mark.slow
def test_a_paused_worker_past_its_lease_has_its_late_writes_refused(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    reference = _reference(pipe)
    run_id = workers.submit(pg_url, pipe, {})
    paused = _worker(pg_url, STEP_RUNTIME_KILL_AT="checkpoint:4", STEP_RUNTIME_KILL_SIGNAL="STOP")
    other = None
    try:
        _wait_stopped(paused)  # about to write its 4th checkpoint, holding the run's lease
        listed = subprocess.run(
            [RUNTIME, "runs", "--store", pg_url], capture_output=True, text=True, env=_env()
        )
        assert f"{run_id}  running (" in listed.stdout, listed.stdout  # with its worker
        other = _worker(pg_url)
        row = workers.wait(pg_url, run_id, timeout=120)
        assert row["status"] == "completed"
        store = open_run_store(pg_url)
        before = store.events(run_id)
        paused.send_signal(signal.SIGCONT)  # it wakes and writes its checkpoint: refused
        deadline = time.monotonic() + 60
        lease_lost = False
        while time.monotonic() < deadline and not lease_lost:
            time.sleep(0.2)
            lease_lost = "lease lost" in _peek(paused)
        assert store.events(run_id) == before
        assert store.load(run_id)["variables"] == reference
        assert store.verify_ledger(run_id, None).ok
    finally:
        out = _stop(paused)
        if other is not None:
            _stop(other)
    assert "lease lost" in out or lease_lost, out[-3000:]


_SEEN: dict[int, str] = {}


def _peek(proc: subprocess.Popen[bytes]) -> str:
    """What a running worker printed so far (non-blocking)."""
    import fcntl

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        chunk = proc.stdout.read() or b""
    except BlockingIOError:
        chunk = b""
    _SEEN[proc.pid] = _SEEN.get(proc.pid, "") + chunk.decode(errors="replace")
    return _SEEN[proc.pid]


@pytest.mark.slow
def test_fifty_runs_over_four_workers_two_killed_complete_exactly_once(pg_url, tmp_path):
    """The issue's test: 50 runs, 4 worker processes, two SIGKILLed at seeded moments."""
    import random

    pipe = _pipeline(tmp_path)
    reference = _reference(pipe)
    ids = [workers.submit(pg_url, pipe, {}) for _ in range(50)]
    rng = random.Random(34)
    # each doomed worker dies as it is about to write its Nth checkpoint (mid-run)
    kills = sorted(rng.sample(range(5, 120), 2))
    procs = [
        _worker(
            pg_url,
            "--concurrency",
            "2",
            "--name",
            f"doomed{k}",
            STEP_RUNTIME_KILL_AT=f"checkpoint:{k}",
        )
        for k in kills
    ] + [_worker(pg_url, "--concurrency", "2", "--name", f"w{i}") for i in range(2)]
    try:
        rows = [workers.wait(pg_url, run_id, timeout=600) for run_id in ids]
    finally:
        outputs = [_stop(p) for p in procs]
    assert [p.returncode for p in procs[:2]] == [-signal.SIGKILL] * 2, outputs[:2]
    assert {r["status"] for r in rows} == {"completed"}
    store = open_run_store(pg_url)
    resumed = 0
    for run_id in ids:
        assert store.load(run_id)["variables"] == reference
        types = [e["type"] for e in store.events(run_id)]
        assert types.count("RUN_COMPLETED") == 1 and types.count("STEP") == STEPS + 1
        resumed += types.count("RUN_RESUMED")
        assert store.verify_ledger(run_id, None).ok
    assert resumed >= 2  # each killed worker left at least one run to resume


def test_a_submitted_runs_model_index_and_subject_are_what_the_worker_runs_with(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    index = tmp_path / "other-index.db"
    subject = '{"tenant": "acme", "clearance": ["public"]}'
    args = ["--model", "extractive", "--index", str(index), "--subject", subject]
    done = subprocess.run(
        [RUNTIME, "submit", pipe, "--store", pg_url, *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert workers.execute(pg_url, run_id, "w-test") == "completed"
    store = open_run_store(pg_url)
    choices = store.choices(run_id)
    assert choices["model"] == "extractive"
    assert str(index) in json.dumps(choices["index"])
    [started] = [e for e in store.events(run_id) if e["type"] == "RUN_STARTED"]
    assert started["subject"]["tenant"] == "acme"


def test_a_bad_model_is_refused_at_submit_and_nothing_is_queued(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    open_run_store(pg_url)  # (the store exists: `runtime runs` lists nothing, not no store)
    done = subprocess.run(
        [RUNTIME, "submit", pipe, "--store", pg_url, "--model", "nonsense:x"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--model" in done.stderr
    assert "Traceback" not in done.stderr
    assert _runs(pg_url) == {}


def test_an_index_url_holding_a_password_is_refused_at_submit(pg_url, tmp_path):
    pipe = _pipeline(tmp_path)
    open_run_store(pg_url)
    for index in ("postgresql://u:s3cretpw@127.0.0.1:1/i", "postgresql://u@h/i?password=s3cretpw"):
        done = subprocess.run(
            [RUNTIME, "submit", pipe, "--store", pg_url, "--index", index],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 1 and "STORE_URL_INVALID" in done.stderr
        assert "s3cretpw" not in done.stderr + done.stdout
    assert _runs(pg_url) == {}
