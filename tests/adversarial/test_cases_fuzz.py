"""Fuzzed cases files: a cases file loads, or every problem is a coded diagnostic at a line.

Mutations of a real cases file (the shipped sample's): bytes cut, doubled or replaced,
lines dropped or swapped, values replaced by every YAML type, keys renamed, hostile
strings (huge, control characters, regexes that do not compile). Whatever comes out of
`load_cases` is a CaseFile or a CasesInvalidError whose diagnostics carry a known code
and a line inside the file; never another exception. The first chunk is in the fast
subset, the rest are `slow` (docs/testing.md).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from runtime import codes
from runtime.eval.cases import CaseFile, CasesInvalidError, load_cases

ROOT = Path(__file__).resolve().parent.parent.parent
SEED_TEXT = (ROOT / "pipelines" / "sample" / "eval.yaml").read_text()
VALUES = [
    None, True, 0, -1, 2**70, 1.5, float("inf"), "", " ", "x" * 5000, "/(/", "/a/q", "\x00\x1b[2J",
    "\u202e", [], [None], {}, {"auto": -3}, {"kind": 1}, {"path": ""}, ["*", "[", "?"],
    {"k": [0]}, {"tokens": []}, {"position": ["start", "start"]}, {"seeds": [-1]},
]  # fmt: skip
KEYS = ["id", "question", "expect", "evidence", "facts", "variants", "distractors", "k",
        "cases", "corpus", "defaults", "repository", "answer_contains", "tools", "max_tokens",
        "position", "seeds", "tokens", "auto", "nonsense", "inputs", "language"]  # fmt: skip


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    if not path:
        return value
    node = doc
    for seg in path[:-1]:
        node = node[seg]
    node[path[-1]] = value
    return doc


def mutate(rng: random.Random) -> str:
    """One mutated cases file."""
    kind = rng.randrange(6)
    text = SEED_TEXT
    if kind == 0:  # bytes
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(text))
            op = rng.randrange(3)
            if op == 0:
                text = text[:i] + text[i + rng.randint(1, 20) :]
            elif op == 1:
                text = text[:i] + text[i : i + 15] + text[i:]
            else:
                text = text[:i] + rng.choice(":-[]{}'\"#&*!|>%@`\t\n ") + text[i + 1 :]
        return text
    if kind == 1:  # lines
        lines = text.splitlines()
        for _ in range(rng.randint(1, 4)):
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if rng.random() < 0.5:
                del lines[i]
            else:
                lines[i], lines[j] = lines[j], lines[i]
            if not lines:
                break
        return "\n".join(lines) + "\n"
    doc = yaml.safe_load(text)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        if kind in (2, 3):  # a value of another type
            doc = _set(doc, path, rng.choice(VALUES))
        elif kind == 4 and path and isinstance(path[-1], str):  # a renamed key
            parent = doc
            for seg in path[:-1]:
                parent = parent[seg]
            parent[rng.choice(KEYS)] = parent.pop(path[-1])
        else:  # a whole case repeated, or the list replaced
            if isinstance(doc, dict) and isinstance(doc.get("cases"), list) and doc["cases"]:
                doc["cases"].append(rng.choice(doc["cases"]))
            else:
                doc = rng.choice([[], {"cases": None}, "text", 3, [doc]])
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=rng.random() < 0.5)


def _check(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    text = mutate(rng)
    path = tmp_path / f"c{seed}.yaml"
    path.write_text(text, encoding="utf-8")
    # the corpus folder resolves beside the file: give it one so `corpus:` can be valid
    (tmp_path / "eshop").mkdir(exist_ok=True)
    try:
        got = load_cases(str(path))
    except CasesInvalidError as exc:
        assert exc.diagnostics, text
        lines = max(1, text.count("\n") + 1)
        for d in exc.diagnostics:
            assert d.code in codes.CODES, (d, text)
            assert d.file == str(path)
            # lines + 1: the end of a file cut inside a flow (the YAML parser's end mark)
            assert 1 <= d.line <= lines + 1 and d.column >= 1, (d, text)
            assert d.severity == "error"
        assert exc.code in codes.CODES and exc.exit_code == 2
        return
    assert isinstance(got, CaseFile) and got.cases
    for case in got.cases:
        assert case.variants and all(v.id for v in case.variants)


@pytest.mark.parametrize("chunk", [0])
def test_fuzzed_cases_files_fast(tmp_path, chunk):
    for seed in range(chunk * 150, chunk * 150 + 150):
        _check(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 2, 3, 4])
def test_fuzzed_cases_files_slow(tmp_path, chunk):
    for seed in range(chunk * 500, chunk * 500 + 500):
        _check(tmp_path, seed)


def test_cli_shows_a_mangled_file_as_positioned_errors(runner, tmp_path):
    from runtime.cli import cli

    for seed in range(10):
        text = mutate(random.Random(1000 + seed))
        path = tmp_path / "c.yaml"
        path.write_text(text, encoding="utf-8")
        res = runner.invoke(
            cli, ["eval", "--retrieval", str(path), "--index", str(tmp_path / "none.db")]
        )
        assert "Traceback" not in res.output + res.stderr
        assert res.exit_code in (0, 1, 2), res.output
        if res.exit_code == 2 and "error CASES_INVALID" in res.stderr:
            assert f"{path}:" in res.stderr
