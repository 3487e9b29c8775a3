"""The summarisers' documented limits, each pinned (issue 24 item 13).

Where a diff hunk ends, summaries at and near their budget, the fitting of long lines,
fenced code in Markdown outlines, log levels and line counts, JSON paths and key counts,
sentences cut at the edges of the text window. The mutants these hold are in
tests/mutation/mutants/fidelity_summarize.toml.
"""

from __future__ import annotations

import json

import pytest

import actions._summarisers  # installs the code summariser; summarise_code is tested
from runtime.context import summarize
from runtime.context.summarize import detect_kind, fit_lines, line_count, summarise
from runtime.context.tokens import get_counter
from runtime.errors import RunError


@pytest.fixture(scope="module")
def counter():
    return get_counter("cl100k_base")


# --- diffs: where a hunk ends ----------------------------------------------------------

SQL_DIFF = """\
diff --git a/p.sql b/p.sql
--- a/p.sql
+++ b/p.sql
@@ -1,5 +1,5 @@
 CREATE PROCEDURE p AS
--- old comment
+-- new comment
 SELECT 1
-SELECT 2
+SELECT 3
 GO
diff --git a/q.sql b/q.sql
--- a/q.sql
+++ b/q.sql
@@ -1,2 +1,2 @@
-a
+b
 c
"""


def test_a_deleted_sql_comment_does_not_end_its_hunk(counter):
    # "--- old comment" deletes the line "-- old comment": the hunk's header says 5 old
    # and 5 new lines, so the hunk goes on after it (it is no file header).
    s = summarise(SQL_DIFF, "diff", 500, counter).text
    lines = s.split("\n")
    assert lines[0] == "diff: 2 file(s), 2 hunk(s), +3 -3, 18 lines"
    assert "p.sql: 1 hunk(s) +2 -2" in lines and "q.sql: 1 hunk(s) +1 -1" in lines
    assert "hunk 1 (line 4, p.sql): @@ -1,5 +1,5 @@ +2 -2" in lines
    assert "  first: --- old comment" in lines and "  last:  +SELECT 3" in lines


def test_a_plain_diff_without_git_headers_starts_a_file_at_each_header(counter):
    plain = "".join(
        f"--- a/f{n}.txt\n+++ b/f{n}.txt\n@@ -1,2 +1,2 @@\n-old {n}\n+new {n}\n same\n"
        for n in range(3)
    )
    s = summarise(plain, "diff", 500, counter).text
    assert s.startswith("diff: 3 file(s), 3 hunk(s), +3 -3")
    assert [ln for ln in s.split("\n") if ln.startswith("f")] == [
        f"f{n}.txt: 1 hunk(s) +1 -1" for n in range(3)
    ]


def test_a_hunk_whose_header_gives_no_count_is_one_line(counter):
    text = "--- a/x\n+++ b/x\n@@ -3 +3 @@\n-x\n+y\n--- a/z\n+++ b/z\n@@ -1 +1 @@\n-1\n+2\n"
    s = summarise(text, "diff", 500, counter).text
    assert s.startswith("diff: 2 file(s), 2 hunk(s), +2 -2")


def test_a_hunks_lines_are_never_shown_without_its_header(counter):
    # Headers of about 40 tokens (a long function context) do not fit a quarter of the
    # budget and are skipped; the hunks' short first lines would fit, but not without them.
    context = "public static async Task<IResult> HandleTheRequestForTheCatalogItemsWithPaging"
    text = "diff --git a/x.cs b/x.cs\n--- a/x.cs\n+++ b/x.cs\n" + "".join(
        f"@@ -{10 * h + 1},1 +{10 * h + 1},1 @@ {context}{h}()\n-a{h}\n+b{h}\n" for h in range(6)
    )
    s = summarise(text, "diff", 70, counter).text
    lines = s.split("\n")
    assert not any(ln.startswith("hunk ") for ln in lines)
    assert not any(ln.startswith(("  first:", "  last:")) for ln in lines), s
    wide = summarise(text, "diff", 1000, counter).text.split("\n")
    for i, line in enumerate(wide):
        if line.startswith("  first: "):
            assert wide[i - 1].startswith("hunk "), wide
    assert "  first: -a0" in wide and "  last:  +b0" in wide


# --- summaries at and near their budget ------------------------------------------------


def test_a_text_exactly_at_its_budget_is_kept_whole_one_under_is_summarised(counter):
    text = "The order is placed. " * 30
    n = counter.count(text)
    assert summarise(text, "text", n, counter).text == text
    cut = summarise(text, "text", n - 1, counter)
    assert cut.text != text and cut.tokens <= n - 1 and cut.text.startswith("text: ")


def test_a_summary_that_overshoots_by_a_little_is_cut_exactly(counter, monkeypatch):
    monkeypatch.setitem(summarize._REGISTRY, "log", lambda text, budget, c: "word " * (budget + 3))
    s = summarise("x\n" * 10, "log", 40, counter)
    assert s.tokens == counter.count(s.text) <= 40


def test_a_budget_of_zero_is_refused(counter):
    with pytest.raises(RunError) as err:
        summarise("text", "text", 0, counter)
    assert err.value.code == "SUMMARY_BUDGET_INVALID"
    assert summarise("text", "text", 1, counter).tokens <= 1


def test_one_long_line_does_not_end_a_summary(counter):
    # The long line is skipped and the thirty short ones after it are taken: more than the
    # exact top-up's 16 tries could add back.
    short = [f"short line {i}" for i in range(30)]
    text = fit_lines(["head"], [short[0], "word " * 200, *short[1:]], 200, counter)
    assert text.split("\n") == ["head", *short]


def test_the_exact_count_tops_a_summary_up_near_its_budget(counter):
    # Indented closing braces: each line costs 3 tokens counted alone (with its newline) and
    # 2 joined ("\n" merges with the indentation). The running count fits 6; the exact count
    # of the joined text fits more, and the summary is topped up to its budget.
    optional = ["        }"] * 12
    text = fit_lines(["head"], optional, 20, counter)
    assert counter.count(text) <= 20 and len(text.split("\n")) - 1 >= 8
    assert counter.count(text + "\n        }") > 20 or len(text.split("\n")) == 13


# --- JSON --------------------------------------------------------------------------------


def test_json_describes_an_arrays_last_item_and_counts_the_keys_not_listed(counter):
    doc = {"items": [{"id": i, "tag": "t"} for i in range(5)] + [{"last": True}]}
    doc.update({f"k{i:02d}": i for i in range(15)})
    s = summarise(json.dumps(doc), "json", 800, counter).text
    assert "$.items[5]: object{1} {last: bool}" in s
    assert "… 4 more keys" in s  # 16 keys, 12 listed


def test_an_odd_key_is_written_as_a_path_rehydrate_reads(counter):
    from runtime.context.pointers import json_slice

    text = json.dumps({"odd key": {"x-y": [1, 2]}, "plain": {"a": 1}})
    s = summarise(text, "json", 400, counter).text
    assert '$["odd key"]' in s and '$["odd key"]["x-y"]' in s and "$.plain" in s
    assert json_slice(text, '$["odd key"]["x-y"]') == "[1, 2]"


def test_a_declared_json_that_does_not_parse_is_a_mismatch_a_detected_one_is_text(counter):
    with pytest.raises(RunError) as err:
        summarise("{not json}", "json", 50, counter)
    assert err.value.code == "SUMMARY_KIND_MISMATCH"
    assert summarise("{not json}", None, 50, counter).kind == "text"


# --- logs, lines, Markdown -----------------------------------------------------------------


def test_a_final_newline_ends_the_last_line_it_starts_none(counter):
    assert (line_count(""), line_count("a"), line_count("a\n"), line_count("a\nb")) == (0, 1, 1, 2)
    s = summarise("INFO start\nINFO go\nINFO end\n", "log", 100, counter).text
    assert s.startswith("log: 3 lines,")


def test_warn_lines_of_a_log_are_flagged(counter):
    log = "\n".join(
        f"2025-06-24 14:36:{i % 60:02d} INFO step {i}" if i != 40 else "WARN disk nearly full"
        for i in range(100)
    )
    s = summarise(log, "log", 60, counter).text
    assert s.startswith("log: 100 lines, 1 error/warning line(s)")
    assert "41: WARN disk nearly full" in s


def test_fenced_code_is_no_heading_and_headings_after_it_are(counter):
    md = "# Title\n\n```bash\n# a comment, no heading\n```\n\n## After the fence\n\n~~~\n# no\n~~~\n### Last\n"
    s = summarise(md, "markdown", 200, counter).text
    assert "a comment" not in s and "# no" not in s
    assert "7:   ## After the fence" in s and "12:     ### Last" in s


def test_a_cut_outline_drops_the_deepest_levels_first(counter):
    md = "\n".join(
        f"{'#' * (1 + i % 4)} Heading number {i} with some words in its title" for i in range(80)
    )
    s = summarise(md, "markdown", 120, counter).text
    levels = [ln.split(": ", 1)[1].strip().split(" ")[0] for ln in s.split("\n")[1:]]
    assert "#" in levels and "####" not in levels


def test_a_hashtag_is_no_heading(counter):
    assert detect_kind("#hashtag one\n#another\nplain text here\n") == "text"
    md = "# Real\n#region code\n## Two\n"
    s = summarise(md, "markdown", 100, counter).text
    assert "region" not in s and s.startswith("markdown: 3 lines, 2 heading(s)")


def test_detection_needs_two_headings_or_one_on_the_first_line(counter):
    assert detect_kind("text first\n# one heading\nmore text\n") == "text"
    assert detect_kind("# heading first\ntext\n") == "markdown"
    assert detect_kind("a\n# one\nb\n## two\n") == "markdown"


def test_a_text_half_of_whose_lines_are_stamped_is_a_log(counter):
    stamped = "2025-06-24 14:36:25 started\nplain line\n2025-06-24 14:36:26 done\nplain again\n"
    assert detect_kind(stamped) == "log"


def test_a_line_exactly_at_the_display_limit_is_whole(counter):
    assert summarize._clip("x" * 200) == "x" * 200
    assert summarize._clip("x" * 201) == "x" * 199 + "…"


# --- text: sentences cut at the window's edges ---------------------------------------------


def test_sentences_cut_by_the_head_or_tail_window_are_not_shown(counter):
    # The text is read 6,000 characters into each end: the sentence the head window ends in,
    # and the one the tail window starts in, are cut there; neither half is ever shown.
    window = summarize._HEAD_CHARS
    for n in range(3000, 3100):  # a length at which both windows cut a sentence mid-way
        sentences = [f"Sentence {i:04d} tells the story of order {i * 7}." for i in range(n)]
        text = " ".join(sentences)
        head, tail = text[:window].rstrip(), text[-window:].lstrip()
        if not head.endswith(".") and not tail.startswith("Sentence "):
            break
    assert not head.endswith(".") and not tail.startswith("Sentence ")
    s = summarise(text, "text", 6000, counter).text
    shown = s.split("\n")[1:]
    assert "[…]" in shown and len(shown) > 200  # both windows whole, but for the cut pieces
    whole = set(sentences)
    assert [line for line in shown if line not in whole and line != "[…]"] == []


# --- code ----------------------------------------------------------------------------------


def test_a_code_summary_counts_its_intro_in_the_budget(counter):
    sql = "".join(
        f"CREATE PROCEDURE dbo.p{i} AS\nBEGIN\n    SELECT {i} FROM dbo.T{i};\nEND\nGO\n"
        for i in range(40)
    )
    for budget in (30, 60, 90):
        body = actions._summarisers.summarise_code(sql, budget, counter)
        assert counter.count(body) <= budget, budget
