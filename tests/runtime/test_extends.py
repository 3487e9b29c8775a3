"""`extends`: merging rules, chains, `#name`, positions in the parent file."""

from __future__ import annotations

from pathlib import Path

from runtime.format.validation import load_pipeline, validate_paths

VALID = Path(__file__).resolve().parent.parent / "data" / "valid"


def test_settings_deep_merge_and_steps_merge_by_id(registry):
    p = load_pipeline(str(VALID / "child.yaml"), registry=registry)
    assert p.settings["max_turn_loops"] == 5  # child scalar wins
    assert p.settings["entry_step_id"] == "start"  # inherited
    assert set(p.settings["models"]) == {"local", "remote"}  # maps merge
    assert [s.id for s in p.steps] == ["start", "done", "middle"]  # new steps append
    start = p.step("start").config
    assert start["next"] == "middle" and start["note"] == "from base"  # child keys override


def test_extends_a_named_pipeline_of_a_pack(registry):
    p = load_pipeline(str(VALID / "from_pack.yaml"), registry=registry)
    assert [s.id for s in p.steps] == ["a", "b", "c"]
    assert p.step("b").action == "noop"


def test_abstract_base_is_not_runnable_but_schema_checked(registry):
    report = validate_paths([str(VALID / "base.yaml")], registry=registry)
    assert report.diagnostics == [] and report.pipelines == []


def test_diagnostic_for_an_inherited_value_points_into_the_parent(tmp_path, registry):
    (tmp_path / "base.yaml").write_text(
        "abstract: true\nsettings:\n  entry_step_id: a\nsteps:\n  - id: a\n    action: noop\n"
        "    count: 0\n    next: b\n"
    )
    (tmp_path / "child.yaml").write_text(
        "extends: base.yaml\nsteps:\n  - id: b\n    action: finish\n"
    )
    report = validate_paths([str(tmp_path / "child.yaml")], registry=registry)
    [d] = report.diagnostics
    assert (Path(d.file).name, d.line, d.code) == ("base.yaml", 7, "SCHEMA_RANGE")


def test_missing_parent_file(tmp_path, registry):
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\nname: c\n")
    [d] = validate_paths([str(tmp_path / "c.yaml")], registry=registry).diagnostics
    assert (d.code, d.line) == ("FILE_NOT_FOUND", 1)


def test_cycle_names_the_files(registry):
    invalid = VALID.parent / "invalid"
    [d] = validate_paths([str(invalid / "cycle_a.yaml")], registry=registry).diagnostics
    assert d.code == "EXTENDS_CYCLE"
    assert "cycle_a.yaml" in d.message and "cycle_b.yaml" in d.message
