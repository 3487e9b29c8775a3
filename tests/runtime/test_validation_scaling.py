"""Validation stays linear in the number of steps: the mechanisms, not timings.

Full garbage collections during loading made validation grow with the square of the
step count (18.6 s for 20,000 steps); loading and checking now run with the
collector paused, and give it back afterwards. benchmarks/validate.py measures.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from validate import generate

SEEN: list[bool] = []


class Probe(runtime.Action):
    """Records, from inside validation, whether the collector runs."""

    name = "probe"
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Any]:
        SEEN.append(gc.isenabled())
        return iter(())


def test_the_collector_is_paused_while_a_pipeline_is_loaded_and_checked(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("settings: {entry_step_id: a}\nsteps:\n  - {id: a, action: probe, end: true}\n")
    registry = runtime.Registry.from_classes(Probe)
    SEEN.clear()
    assert runtime.validate(str(path), registry=registry).diagnostics == []
    assert runtime.load(str(path), registry=registry).steps[0].id == "a"
    assert SEEN == [False, False]
    assert gc.isenabled()  # given back


def test_a_big_pipeline_validates_and_the_collector_is_back(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(generate(3000, compact=True))
    report = runtime.validate(str(path))
    assert (report.errors, report.warnings, len(report.pipelines[0].steps)) == (0, 0, 3000)
    assert gc.isenabled()


def test_the_pause_is_shared_and_given_back_by_the_last_holder(tmp_path):
    from runtime.format.loader import gc_paused

    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        with gc_paused():
            started.set()
            release.wait(5)

    other = threading.Thread(target=hold)
    other.start()
    started.wait(5)
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other holder still loads
    release.set()
    other.join(5)
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(tmp_path):
    gc.disable()
    try:
        runtime.validate(str(tmp_path / "missing.yaml"))
        assert not gc.isenabled()
    finally:
        gc.enable()
