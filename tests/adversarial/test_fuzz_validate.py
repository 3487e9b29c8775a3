"""Validation never crashes: wrongly typed values, mutated real pipelines, a broken plugin.

The rule these pin: no check runs on a value that failed an earlier one (the schema
is a gate per path), and one file the validator cannot handle costs the batch
nothing but that file's own VALIDATION_CRASHED diagnostic.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import runtime
from runtime.cli import cli
from runtime.contract.action import Action, Problem
from runtime.contract.registry import Registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_pipelines

HEAD = "name: p\nsettings:\n  entry_step_id: s\nsteps:\n"


def _found(report: runtime.Report) -> list[tuple[int, int, str, str]]:
    return [(d.line, d.column, d.code, d.message) for d in report.diagnostics]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            HEAD + "  - {id: s, action: set_variables, rules: [{set: [], value: 1}], end: true}\n",
            [(5, 50, "SCHEMA_TYPE", "`set` must be a string, got array []")],
        ),
        (
            HEAD
            + "  - {id: s, action: set_variables, rules: [{set: {a: 1}, value: 1}], end: true}\n",
            [(5, 50, "SCHEMA_TYPE", "`set` must be a string, got object {'a': 1}")],
        ),
        (
            "name: p\nsettings: [x, y]\nsteps:\n  - {id: s, action: set_variables, "
            "rules: [{set: a, value: 1}], end: true}\n",
            [(2, 11, "SCHEMA_TYPE", "`settings` must be an object, got array ['x', 'y']")],
        ),
        (
            "name: p\nsettings: true\nsteps:\n  - {id: s, action: set_variables, "
            "rules: [{set: a, value: 1}], end: true}\n",
            [(2, 11, "SCHEMA_TYPE", "`settings` must be an object, got boolean True")],
        ),
        (
            "name: p\nsettings: {entry_step_id: s}\nsteps: 1\n",
            [(3, 8, "SCHEMA_TYPE", "`steps` must be an array, got integer 1")],
        ),
    ],
    ids=["set-list", "set-map", "settings-list", "settings-bool", "steps-int"],
)
def test_a_wrongly_typed_value_is_one_diagnostic_not_a_traceback(tmp_path, text, expected):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert _found(runtime.validate(str(path))) == expected


def test_the_gate_is_per_value_siblings_are_still_checked(tmp_path):
    # The first rule's `set` failed the schema; the second rule still gets its own check.
    path = tmp_path / "p.yaml"
    path.write_text(
        HEAD + "  - id: s\n    action: set_variables\n    rules:\n"
        "      - {set: 7, value: 1}\n      - {set: run_id, value: 2}\n    end: true\n"
    )
    assert _found(runtime.validate(str(path))) == [
        (8, 15, "SCHEMA_TYPE", "`set` must be a string, got integer 7"),
        (9, 15, "PROTECTED_FIELD", "'run_id' is engine-owned"),
    ]


def test_a_failed_value_does_not_cascade_into_the_graph(tmp_path):
    # `next` failed its pattern: it is left out, and the step is not then "stuck".
    path = tmp_path / "p.yaml"
    path.write_text(
        HEAD + "  - {id: s, action: set_variables, rules: [{set: a, value: 1}], next: 'no way!'}\n"
    )
    assert [d.code for d in runtime.validate(str(path)).diagnostics] == ["SCHEMA_PATTERN"]


class _Broken(Action):
    """A plugin action whose own check has a bug."""

    name = "broken"
    summary = "Raise in check."
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        raise KeyError("oops")


class _Fine(Action):
    name = "fine"
    summary = "Nothing."
    runnable = True


def test_one_crashing_file_does_not_stop_the_batch(tmp_path):
    (tmp_path / "a_broken.yaml").write_text(HEAD + "  - {id: s, action: broken, end: true}\n")
    (tmp_path / "b_typo.yaml").write_text(HEAD + "  - {id: s, action: fine, end: true, nxt: 1}\n")
    registry = Registry.from_classes(_Broken, _Fine)
    report = runtime.validate(str(tmp_path), registry=registry)
    got = [(Path(d.file).name, d.line, d.column, d.code) for d in report.diagnostics]
    assert got == [
        ("a_broken.yaml", 1, 1, "VALIDATION_CRASHED"),
        ("b_typo.yaml", 5, 38, "SCHEMA_UNKNOWN_FIELD"),
    ]
    crashed = report.diagnostics[0]
    assert crashed.message.startswith(
        "validation stopped on KeyError: 'oops' at test_fuzz_validate.py:"
    )


def test_a_folder_with_a_once_crashing_file_reports_every_file(tmp_path):
    (tmp_path / "a.yaml").write_text(
        HEAD + "  - {id: s, action: set_variables, rules: [{set: [], value: 1}], end: true}\n"
    )
    (tmp_path / "b.yaml").write_text("name: b\nsettings: true\nsteps: 1\n")
    (tmp_path / "c.yaml").write_text(HEAD + "  - {id: s, action: loop_guard, end: true}\n")
    result = CliRunner().invoke(cli, ["validate", "--format", "github", str(tmp_path)])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1
    titles = [line.split("title=")[1].split("::")[0] for line in result.output.splitlines()]
    files = [Path(line.split("file=")[1].split(",")[0]).name for line in result.output.splitlines()]
    assert list(zip(files, titles, strict=True)) == [
        ("a.yaml", "SCHEMA_TYPE"),
        ("b.yaml", "SCHEMA_TYPE"),
        ("b.yaml", "SCHEMA_TYPE"),
        ("c.yaml", "SCHEMA_MISSING_FIELD"),
        ("c.yaml", "SCHEMA_MISSING_FIELD"),
    ]


FUZZ_COUNT = 2000
FUZZ_SEED = 20261123
# One sequence of 2,000 mutants, split: the first 200 run in the fast subset, the other
# 1,800 are slow, in chunks the test workers share. CI runs them all, so every run still
# validates the same 2,000. The sequence depends on the corpus (every pipeline in the
# repository), so which kinds of mutation the first 200 hold changes as pipelines are
# added; each slow chunk holds them all.
FUZZ_FAST = 200
FUZZ_CHUNK = 450
KINDS = ["delete", "duplicate", "line", "rename", "root", "swap", "unwrap", "wrap"]


def test_mutated_real_pipelines_validate_with_positioned_coded_diagnostics(tmp_path):
    ops: set[str] = set()
    done, failures = fuzz_pipelines.run(FUZZ_FAST, FUZZ_SEED, tmp_path, ops)
    assert done == FUZZ_FAST
    assert failures == []
    assert ops <= set(KINDS)


@pytest.mark.slow
@pytest.mark.parametrize("start", range(FUZZ_FAST, FUZZ_COUNT, FUZZ_CHUNK))
def test_the_rest_of_the_fuzzed_pipelines_validate_too(tmp_path, start):
    ops: set[str] = set()
    end = min(FUZZ_COUNT, start + FUZZ_CHUNK)
    done, failures = fuzz_pipelines.run(end, FUZZ_SEED, tmp_path, ops, start=start)
    assert done == end - start
    assert failures == []
    # Every kind of mutation was among them but a root swap, which only a document without
    # an inner value gets: whether a chunk holds one depends on the corpus (a pipeline's
    # edit moves the whole sequence). test_a_whole_document_swapped_is_coded pins it.
    assert set(KINDS) - {"root"} <= ops <= set(KINDS)


@pytest.mark.parametrize("value", fuzz_pipelines.FOREIGN, ids=repr)
def test_a_whole_document_swapped_is_coded(tmp_path, value):
    """A pipeline file that is one foreign value (the fuzzer's root swap): coded
    diagnostics with positions, never a crash."""
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(value))
    report = runtime.validate(str(path))
    assert report.errors >= 1
    assert all(d.code != "VALIDATION_CRASHED" and d.line >= 1 for d in report.diagnostics)
