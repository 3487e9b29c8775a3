"""Annotated fixtures: every `# expect: CODE` comment marks a diagnostic on its own line.

The test asserts the exact set of (line, code) pairs per file, so a missing,
extra or mispositioned diagnostic fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runtime.format.validation import validate_paths

DATA = Path(__file__).resolve().parent.parent / "data"
INVALID = sorted((DATA / "invalid").glob("*.yaml"))
_EXPECT = re.compile(r"#\s*expect:\s*([A-Z_, ]+)")


def _expected(path: Path) -> set[tuple[str, int, str]]:
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        m = _EXPECT.search(line)
        if m:
            for code in m.group(1).split(","):
                found.add((path.name, number, code.strip()))
    return found


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture_reports_exactly_the_marked_diagnostics(path, registry):
    report = validate_paths([str(path)], registry=registry)
    got = {
        (Path(d.file).name, d.line, d.code)
        for d in report.diagnostics
        if Path(d.file).name == path.name
    }
    assert got == _expected(path)


def test_every_invalid_fixture_has_expectations():
    assert all(_expected(p) for p in INVALID)


@pytest.mark.parametrize("path", sorted((DATA / "valid").glob("*.yaml")), ids=lambda p: p.name)
def test_valid_fixtures_are_clean(path, registry):
    report = validate_paths([str(path)], registry=registry)
    assert report.diagnostics == []


def test_all_problems_of_all_files_in_one_pass(registry):
    report = validate_paths([str(DATA / "invalid")], registry=registry)
    files = {Path(d.file).name for d in report.diagnostics}
    assert files == {p.name for p in INVALID}
    assert report.errors >= sum(len(_expected(p)) for p in INVALID) - 10
