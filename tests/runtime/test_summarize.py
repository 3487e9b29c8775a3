"""Summarisers: within their token budget (counted), faithful to real payloads, deterministic."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

import actions._summarisers  # noqa: F401  (installs the code summariser)
from runtime.context import summarize
from runtime.context.pointers import hunk_slice, json_slice, line_slice
from runtime.context.summarize import detect_kind, summarise
from runtime.context.tokens import get_counter
from runtime.errors import RunError

DATA = Path(__file__).parents[1] / "data"
REAL = DATA / "summaries"


@pytest.fixture(scope="module")
def counter():
    return get_counter()


def real(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def novel() -> str:
    with lzma.open(DATA / "long_inputs" / "pride_and_prejudice.txt.xz", "rt") as f:
        return f.read()


CSHARP = (DATA / "realworld").glob("**/*.cs")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("eshop_aaf1857.diff", "diff"),
        ("eshop_catalog.json", "json"),
        ("eshop_README.md", "markdown"),
        ("dpkg.log", "log"),
    ],
)
def test_kinds_of_real_payloads_are_detected(name, kind):
    assert detect_kind(real(name)) == kind


def test_novel_is_text_and_csharp_is_code(novel):
    assert detect_kind(novel) == "text"
    cs = next(iter(sorted(CSHARP)), None)
    assert cs is not None
    assert detect_kind(cs.read_text(encoding="utf-8")) == "code"


@pytest.mark.parametrize("budget", [24, 60, 120, 299])
@pytest.mark.parametrize(
    "name", ["eshop_aaf1857.diff", "eshop_catalog.json", "eshop_README.md", "dpkg.log", "novel"]
)
def test_every_summary_is_within_its_budget_exactly_counted(counter, novel, name, budget):
    text = novel if name == "novel" else real(name)
    s = summarise(text, None, budget, counter)
    assert s.tokens == counter.count(s.text)
    assert 0 < s.tokens <= budget
    assert s.original_chars == len(text)
    if name in ("novel", "dpkg.log", "eshop_aaf1857.diff"):
        # More to show than fits: the budget is used, not wasted.
        assert s.tokens * 2 >= budget
    assert summarise(text, None, budget, counter) == s  # deterministic


def test_budgets_around_a_summary_size_are_each_kept_and_used(counter):
    text = real("eshop_README.md")
    s = summarise(text, None, 90, counter)
    for budget in range(s.tokens - 6, s.tokens + 1):
        t = summarise(text, None, budget, counter)
        assert budget - 15 <= t.tokens <= budget
    assert summarise(text, None, s.tokens - 1, counter).text != s.text


def test_diff_summary_counts_files_hunks_and_lines_and_names_exact_hunks(counter):
    diff = real("eshop_aaf1857.diff")
    s = summarise(diff, "diff", 2000, counter)
    first = s.text.split("\n")[0]
    assert first == "diff: 7 file(s), 19 hunk(s), +206 -32, 416 lines"
    assert "src/Catalog.API/Apis/CatalogApi.cs: 12 hunk(s) +107 -30" in s.text
    adds = sum(1 for ln in diff.split("\n") if ln.startswith("+") and not ln.startswith("+++"))
    dels = sum(1 for ln in diff.split("\n") if ln.startswith("-") and not ln.startswith("---"))
    assert (adds, dels) == (206, 32)
    # Each "hunk N (line L, file)" names the hunk that hunk N slices back, at line L.
    for line in s.text.split("\n"):
        if line.startswith("hunk "):
            n = int(line.split()[1])
            at = int(line.split("(line ")[1].split(",")[0])
            header = hunk_slice(diff, n).split("\n")[0]
            assert diff.split("\n")[at - 1] == header
            assert header[:60] in line
    assert "hunk 19 " in s.text
    assert "first: +" in s.text and "last:  +" in s.text


def _many_files(files: int, hunks: int = 1) -> str:
    out = []
    for f in range(files):
        out += [
            f"diff --git a/src/f{f}.cs b/src/f{f}.cs",
            f"--- a/src/f{f}.cs",
            f"+++ b/src/f{f}.cs",
        ]
        for h in range(hunks):
            out += [f"@@ -{10 * h + 1},2 +{10 * h + 1},2 @@", f"-old {f}.{h}", f"+new {f}.{h}"]
    return "\n".join(out) + "\n"


def test_a_diff_summary_that_lists_some_files_says_how_many_it_left_out(counter):
    s = summarise(_many_files(40), "diff", 150, counter)
    lines = s.text.split("\n")
    listed = [ln for ln in lines if ln.startswith("src/f")]
    assert 0 < len(listed) < 40 and s.tokens <= 150
    hunks = [ln for ln in lines if ln.startswith("hunk ")]
    assert lines[-1] == (
        f"[not listed: {40 - len(listed)} of 40 file(s), {40 - len(hunks)} of 40 hunk(s)]"
    )


def test_a_diff_summary_that_lists_every_file_but_not_every_hunk_counts_the_hunks(counter):
    s = summarise(_many_files(2, hunks=30), "diff", 200, counter)
    lines = s.text.split("\n")
    assert [ln for ln in lines if ln.startswith("src/f")] == [
        "src/f0.cs: 30 hunk(s) +30 -30",
        "src/f1.cs: 30 hunk(s) +30 -30",
    ]
    hunks = [ln for ln in lines if ln.startswith("hunk ")]
    assert 0 < len(hunks) < 60
    assert lines[-1] == f"[not listed: {60 - len(hunks)} of 60 hunk(s)]"


def test_a_diff_summary_that_lists_everything_adds_no_note(counter):
    s = summarise(_many_files(3), "diff", 2000, counter)
    assert "not listed" not in s.text
    assert len([ln for ln in s.text.split("\n") if ln.startswith("hunk ")]) == 3


def test_json_summary_paths_slice_back_to_values_of_the_shape_shown(counter):
    doc = real("eshop_catalog.json")
    s = summarise(doc, "json", 300, counter)
    assert s.text.split("\n")[1] == "$: array[101] of object"
    data = json.loads(doc)
    for line in s.text.split("\n")[1:]:
        path, rest = line.split(" ", 1)
        path = path.rstrip(":")
        value = json.loads(json_slice(doc, path))
        if rest.startswith("= "):
            shown = rest[2:]
            if not shown.endswith("…"):
                assert json.loads(shown) == value
        elif rest.startswith("object{"):
            assert isinstance(value, dict) and rest.startswith(f"object{{{len(value)}}}")
        else:
            assert isinstance(value, list) and len(value) == len(data)
    assert "$[100]: object{6}" in s.text


def test_json_is_walked_without_recursion(counter):
    deep = "[" * 50_000 + "]" * 50_000  # deeper than Python's parser goes
    s = summarise(deep, None, 50, counter)
    assert s.kind == "text"  # detected as JSON, not parseable as such: summarised as text
    with pytest.raises(RunError) as err:
        summarise(deep, "json", 50, counter)
    assert err.value.code == "SUMMARY_KIND_MISMATCH"
    wide = json.dumps({f"k{i}": {"v": [i] * 3} for i in range(20_000)})
    s = summarise(wide, None, 120, counter)
    assert "$: object{20000}" in s.text and "… 19988 more keys" in s.text


def test_markdown_outline_line_numbers_point_at_the_headings(counter):
    md = real("eshop_README.md")
    s = summarise(md, None, 400, counter)
    lines = md.split("\n")
    outline = s.text.split("\n")[1:]
    assert len(outline) == 12
    for entry in outline:
        number, heading = entry.split(": ", 1)
        assert lines[int(number) - 1].strip() == heading.strip()
    numbers = [int(e.split(":")[0]) for e in outline]
    assert numbers == sorted(numbers)
    # Cut: the deepest levels go first, the order stays the document's.
    small = summarise(md, None, 60, counter).text
    assert "# eShop Reference Application" in small and "#####" not in small


def test_log_errors_come_first_then_head_and_tail(counter):
    base = real("dpkg.log").split("\n")[:-1]
    lines = list(base)
    lines.insert(350, "2025-06-24 14:36:40 ERROR dpkg: error processing package foo (--configure)")
    lines.insert(500, "2025-06-24 14:36:45 WARNING: something odd")
    log = "\n".join(lines) + "\n"
    s = summarise(log, None, 90, counter)
    assert s.kind == "log"
    assert s.text.split("\n")[0] == "log: 702 lines, 2 error/warning line(s)"
    assert "351: 2025-06-24 14:36:40 ERROR dpkg" in s.text
    assert "501: 2025-06-24 14:36:45 WARNING" in s.text
    for entry in s.text.split("\n")[1:]:
        number, shown = entry.split(": ", 1)
        assert line_slice(log, int(number), int(number)).rstrip("\n") == shown
    # No errors: head and tail.
    plain = summarise(real("dpkg.log"), None, 90, counter).text
    assert "\n1: " in plain and "\n700: " in plain


def test_text_keeps_whole_sentences_from_both_ends(counter, novel):
    s = summarise(novel, None, 200, counter)
    assert s.text.startswith("text: 694,192 characters, 13,848 lines")
    assert "It is a truth universally acknowledged" in s.text
    assert "the means of uniting them." in s.text
    assert s.text.index("[…]") < s.text.index("the means of uniting them.")
    short = "One sentence. Two sentences."
    assert summarise(short, "text", 50, counter).text == short  # it fits: unchanged


def test_code_uses_the_classifiers_compaction(counter):
    cs = sorted((DATA / "realworld").glob("**/*.cs"))
    text = max((p.read_text(encoding="utf-8") for p in cs), key=len)
    s = summarise(text, "code", 150, counter)
    assert s.text.startswith("code (dotnet)") and s.tokens <= 150
    assert "elided" in s.text


def test_bad_requests_are_coded(counter, monkeypatch):
    with pytest.raises(RunError) as err:
        summarise("x", "text", 0, counter)
    assert err.value.code == "SUMMARY_BUDGET_INVALID"
    monkeypatch.delitem(summarize._REGISTRY, "code")
    with pytest.raises(RunError) as err:
        summarise("class A {}", "code", 10, counter)
    assert err.value.code == "SUMMARY_KIND_UNAVAILABLE"
    with pytest.raises(RunError) as err:
        summarise("{not json}", "json", 10, counter)
    assert err.value.code == "SUMMARY_KIND_MISMATCH"


def test_text_without_sentences_keeps_whole_lines_from_both_ends(counter):
    listing = "".join(f"row {i}: value {i * 7} unit\n" for i in range(2000))
    s = summarise(listing, "text", 80, counter)
    lines = s.text.split("\n")
    assert lines[1] == "row 0: value 0 unit" and lines[-1] == "row 1999: value 13993 unit"
    assert "[…]" in lines and all(ln in listing for ln in lines[1:] if ln != "[…]")


def test_a_summariser_that_overshoots_is_cut_to_the_budget(counter, monkeypatch):
    # Ten tokens over: the cut must be exact, not "about right".
    monkeypatch.setitem(
        summarize._REGISTRY, "log", lambda text, budget, c: c.truncate(text, budget + 10)
    )
    s = summarise(real("dpkg.log"), "log", 50, counter)
    assert s.tokens == counter.count(s.text) <= 50 and s.tokens >= 45
    assert real("dpkg.log").startswith(s.text)
