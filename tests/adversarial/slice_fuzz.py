"""The slice and tool-argument fuzzer: random and pathological forms, and an oracle.

`expressions(seed, n)` and `payloads(seed, n)` generate the inputs; `oracle(text, part)`
answers what the documented grammar (docs/budget.md) says a slice is, computed here from
the original without runtime/context/pointers.py: the exact text, or None for a slice
that must be SLICE_INVALID. Shared by tests/adversarial/test_slice_fuzz.py and
benchmarks/slice_fuzz.py (which times every call).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

TEXT = "".join(f"line {n}: {'word ' * (n % 7)}end\n" for n in range(1, 3001))  # 3,000 lines
TAIL = "first\nsecond\n\nfourth without an ending"
DOC = json.dumps(
    {
        "query": "q",
        "total": 3,
        "results": [
            {"id": i, "title": f"letter {i}", "tags": ["a", "b"][: i % 3], "n": None}
            for i in range(30)
        ],
        "odd key": {"é": 1, 'q"uote': [True, False], "": {}},
    },
    indent=1,
)
DIFF = "".join(
    f"diff --git a/f{f}.py b/f{f}.py\n--- a/f{f}.py\n+++ b/f{f}.py\n"
    + "".join(
        f"@@ -{h * 10},2 +{h * 10},2 @@ def f():\n-    old {h}\n+    new {h}\n" for h in range(3)
    )
    for f in range(4)
)
ORIGINALS = {"text": TEXT, "tail": TAIL, "json": DOC, "diff": DIFF}
KINDS = {"text": "text", "tail": "text", "json": "json", "diff": "diff"}
LIMIT = 1_000
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def oracle(text: str, part: str | None) -> str | None:
    """The exact slice the grammar gives, or None (SLICE_INVALID)."""
    if part is None:
        return text
    if len(part) > LIMIT:
        return None
    s = part.strip()
    if not s:
        return text
    if s.startswith("$"):
        return _json(text, s)
    m = re.fullmatch(r"(?:lines?\s+)?([0-9]+)\s*(?:-\s*([0-9]+))?", s, re.I)
    if m:
        if any(g and len(g) > 15 for g in m.groups()):
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        total = len(starts) - (1 if text.endswith("\n") else 0)
        if not 1 <= first <= last <= total:
            return None
        return text[starts[first - 1] : starts[last] if last < len(starts) else len(text)]
    m = re.fullmatch(r"hunk\s+([0-9]+)", s, re.I)
    if m:
        if len(m.group(1)) > 15:
            return None
        lines = text.splitlines(keepends=True)
        heads = [i for i, ln in enumerate(lines) if ln.startswith("@@ ")]
        n = int(m.group(1))
        if not 1 <= n <= len(heads):
            return None
        end = heads[n - 1] + 1
        while end < len(lines) and not lines[end].startswith(
            ("@@ ", "diff --git ", "--- ", "Index: ")
        ):
            end += 1
        return "".join(lines[heads[n - 1] : end])
    return None


def _json(text: str, path: str) -> str | None:
    """The value at a path, re-found in the text: checked by value and by position."""
    steps: list[str | int] = []
    i = 1
    while i < len(path):
        if path[i] == ".":
            m = _WORD.match(path, i + 1)
            if not m:
                return None
            steps.append(m.group())
            i = m.end()
        elif path.startswith('["', i):
            try:
                key, end = json.JSONDecoder().raw_decode(path, i + 1)
            except ValueError:
                return None
            if not isinstance(key, str) or not path.startswith("]", end):
                return None
            steps.append(key)
            i = end + 1
        elif path[i] == "[":
            m = re.compile(r"[0-9]+\]").match(path, i + 1)
            if not m or len(m.group()) - 1 > 15:
                return None
            steps.append(int(m.group()[:-1]))
            i = m.end()
        else:
            return None
    try:
        value: Any = json.loads(text)
    except ValueError:
        return None
    for step in steps:
        if (isinstance(step, int) and isinstance(value, list) and step < len(value)) or (
            isinstance(step, str) and isinstance(value, dict) and step in value
        ):
            value = value[step]
        else:
            return None
    return json.dumps(value)  # compared by value: the slice is the text as written


def same(expected: str, got: str, part: str | None, original: str) -> bool:
    """Whether got is the oracle's answer (a JSON value: equal as JSON and part of the text)."""
    if part is not None and part.strip().startswith("$"):
        return got in original and json.loads(got) == json.loads(expected)
    return got == expected


_ALPHABET = [
    *"0123456789 \t\n-$.[]\"\\'aelinshuk,:",
    "lines ",
    "line ",
    "hunk ",
    "\u0661",
    "é",
    "\x00",
]


def expressions(seed: int, n: int) -> list[str | None]:
    """n slice expressions: valid ones at the edges, near misses, noise and monsters."""
    rng = random.Random(seed)
    doc_paths = list(_paths(json.loads(DOC)))
    out: list[str | None] = []
    for _ in range(n):
        roll = rng.random()
        total = rng.choice([3000, 4, 3001, 0, 1, 2, 2999, 10**15, 10**16])
        if roll < 0.25:
            a = rng.choice([0, 1, 2, total - 1, total, total + 1, rng.randint(1, 3000)])
            b = rng.choice([a, a + 1, a - 1, total, rng.randint(1, 3001)])
            form = rng.choice(
                [
                    "lines {a}-{b}",
                    "{a}-{b}",
                    "line {a}",
                    "{a}",
                    "LINES  {a} - {b}",
                    " lines {a}-{b} ",
                ]
            )
            out.append(form.format(a=a, b=b))
        elif roll < 0.45:
            path = rng.choice(doc_paths)
            out.append(rng.choice([path, path + "[0]", path + ".x", " " + path + " ", path + "]"]))
        elif roll < 0.55:
            out.append(f"hunk {rng.choice([0, 1, 3, 12, 13, 10**20])}")
        elif roll < 0.62:
            out.append(None if rng.random() < 0.5 else rng.choice(["", "   ", "\n"]))
        elif roll < 0.85:
            out.append("".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 40))))
        else:
            out.append(_monster(rng))
    return out


def _monster(rng: random.Random) -> str:
    """A pathological form: long runs of blanks or digits, deep brackets, long paths."""
    size = rng.choice([LIMIT - 10, LIMIT, LIMIT + 1, 5_000, 300_000])
    return rng.choice(
        [
            "1" + " " * size + "x",
            "lines 1" + " " * size + "- 2",
            "lines " + "9" * size,
            "$[" + "9" * size + "]",
            "$" + ".a" * (size // 2),
            "$" + "[" * size,
            '$["' + "\\" * size + '"]',
            "hunk " + " " * size + "1",
            " " * size,
            " " * (size - 8) + "line 3",
        ]
    )


def _paths(value: Any, path: str = "$"):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            step = f".{k}" if _WORD.fullmatch(k) else f"[{json.dumps(k)}]"
            yield from _paths(v, path + step)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, f"{path}[{i}]")


def payloads(seed: int, n: int, pointer_ids: dict[str, str]) -> list[tuple[str, str | None]]:
    """n (tool arguments, original name or None) pairs: valid calls and junk."""
    rng = random.Random(seed)
    parts = expressions(seed + 1, n)
    out: list[tuple[str, str | None]] = []
    for i in range(n):
        name = rng.choice(list(pointer_ids))
        roll = rng.random()
        if roll < 0.45:
            args: dict[str, Any] = {"pointer_id": pointer_ids[name]}
            if parts[i] is not None:
                args["slice"] = parts[i]
            out.append((json.dumps(args, ensure_ascii=rng.random() < 0.5), name))
            continue
        depth = rng.choice([10, 999, 1_000, 5_000, 100_000])
        out.append(
            (
                rng.choice(
                    [
                        "[" * depth + "]" * depth,
                        '{"pointer_id": ' + "[" * depth,
                        '{"pointer_id": "' + "x" * rng.choice([10, 9_000, 1_000_000]) + '"}',
                        json.dumps({"pointer_id": 7}),
                        json.dumps({"pointer_id": pointer_ids[name], "slice": ["lines 1-2"]}),
                        json.dumps([pointer_ids[name]]),
                        "",
                        "null",
                        "{not json",
                        json.dumps({"slice": "lines 1-2"}),
                        json.dumps({"pointer_id": "ptr-" + "0" * 16}),
                        json.dumps({"pointer_id": pointer_ids[name] + " "}),
                        "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 60))),
                    ]
                ),
                None,
            )
        )
    return out
