"""docs/budget.md's example outputs are what the commands they show print today.

Each block opens with `$ runtime ...` run from the repository root; the rest of the block
is its output, compared whole (a block cut short with `...` would hide lines the command
gained, as the per-step policy lines of `runtime budget` once were).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "budget.md"
SHOWN = (
    "runtime validate pipelines/long_inputs_unguarded.yaml",
    "runtime budget pipelines/code_qa.yaml",
)


def _blocks() -> dict[str, str]:
    """Each fenced block that opens with `$ runtime ...`: the command -> the output shown."""
    out = {}
    for body in re.findall(r"```\n\$ (runtime [^\n]*)\n(.*?)```", PAGE.read_text(), re.S):
        out[body[0]] = body[1]
    return out


def test_the_page_shows_the_commands_checked_here():
    assert set(SHOWN) <= set(_blocks())


@pytest.mark.parametrize("command", SHOWN)
def test_an_example_block_is_the_commands_output(command, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, shlex.split(command)[1:])
    assert result.exit_code in (0, 1)
    assert _blocks()[command] == result.stdout
