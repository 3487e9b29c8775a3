"""The helpers that stand in for whole copies of a large text (issue 25 item 9) give the
answers the copies gave: UTF-8 size, content hash, message equality."""

from __future__ import annotations

import hashlib

import pytest

from runtime.context import packs
from runtime.context import policy as pol

MIXED = ("plain ascii line\n" * 40_000) + "\u00e9\u2014\u4e2d\U0001f600" * 30_000 + "end"


@pytest.mark.parametrize("text", ["", "ascii only", MIXED, MIXED[: (1 << 20) + 1]])
def test_utf8_size_and_content_hash_equal_the_whole_encoding(text):
    raw = text.encode("utf-8")
    assert pol._utf8_size(text) == len(raw)
    assert packs.content_hash(text) == "sha256:" + hashlib.sha256(raw).hexdigest()


def test_a_message_is_compared_piece_by_piece():
    big = "x" * 100_000
    message = pol.PromptMessage("user", ["q\n\n", pol.Segment("doc", big), "!"])
    assert message.is_content("q\n\n" + big + "!")
    assert message.content() == "q\n\n" + big + "!"
    for other in ("q\n\n" + big, "q\n\n" + big + "!!", "q\n\n" + big[:-1] + "y!", "", "q"):
        assert not message.is_content(other)
    assert pol.PromptMessage("user", []).is_content("")


def test_the_inputs_depth_scan_keeps_no_memory_per_escape():
    """json_depth's string pattern is possessive: a string with many escapes (every line
    of a large document) keeps no backtracking point per escape (a 200 MB input: 266 MiB)."""
    import json
    import tracemalloc

    from runtime.cli._inputs import json_depth

    text = json.dumps({"doc": "line\n" * 200_000, "nested": [[{"a": "b\\"}]]})
    tracemalloc.start()
    try:
        assert json_depth(text, 64) == 4
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(text) // 4


def test_a_joined_text_compares_as_the_joined_string():
    import random

    from runtime.context.joined import JoinedText

    rng = random.Random(7)
    for _ in range(400):
        parts = ["".join(rng.choice("ab\n") for _ in range(rng.randint(0, 5))) for _ in range(4)]
        parts = parts[: rng.randint(0, 4)]
        joined, text = JoinedText(parts, "\n\n"), "\n\n".join(parts)
        assert (len(joined), str(joined)) == (len(text), text)
        for start in range(len(text) + 2):
            for size in range(5):
                prefix = text[start : start + size]
                for probe in (prefix, prefix + "a", "b" + prefix[1:], prefix[:-1] + "\n"):
                    assert joined.startswith(probe, start) == text.startswith(probe, start)


def test_a_large_summarised_input_is_not_copied_into_the_message(tmp_path):
    """A 20 MB input that call_model's policy puts behind a pointer: the run's Python peak
    (tracemalloc) stays near one copy of it, from the --inputs file to the stored original
    (before: the file's text and the value at once, then the value and the joined message)."""
    import json
    import tracemalloc

    from click.testing import CliRunner

    from runtime.cli import cli

    size = 20_000_000
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "answer.md").write_text("Answer from the document.\n")
    pipeline = {
        "name": "big_input",
        "settings": {
            "entry_step_id": "answer",
            "models": {"small": {"provider": "extractive", "context_window": 8192}},
            "context_policy": {"enabled": True, "summary_tokens": 160},
        },
        "inputs": {"question": {"type": "string"}, "doc": {"type": "string"}},
        "steps": [
            {
                "id": "answer",
                "action": "call_model",
                "model": "small",
                "prompt_key": "answer",
                "max_output_tokens": 200,
                "user_parts": {
                    "question": {"source": "question", "summarizable": False},
                    "doc": {"source": "doc", "summary_kind": "text"},
                },
                "end": True,
            }
        ],
    }
    (tmp_path / "p.yaml").write_text(json.dumps(pipeline))
    line = "It is a truth universally acknowledged, that a single man wants a fortune.\n"
    with open(tmp_path / "in.json", "w") as fh:
        json.dump({"question": "What is acknowledged?", "doc": line * (size // len(line))}, fh)
    (tmp_path / "small.json").write_text('{"question": "What?", "doc": "' + "x " * 9000 + '"}')

    def run(inputs: str) -> None:
        args = ["exec", str(tmp_path / "p.yaml"), "--inputs", str(tmp_path / inputs)]
        args += ["--max-input-bytes", str(3 * size), "--store", str(tmp_path / "runs.db")]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output

    tracemalloc.start()
    try:
        run("small.json")  # what does not grow with the input: the tokenizer's tables, modules
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run("in.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - base < 1.3 * size, (peak - base) / size
