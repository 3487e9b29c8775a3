"""Every command that can be given a postgresql:// location says how to install the driver
when it is missing (STORE_DRIVER_MISSING, exit 1), never a traceback: `runtime index` and
`runtime worker` raised ModuleNotFoundError before (found from a fresh clone without the
postgres extra)."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from runtime.cli import cli

URL = "postgresql://u:s3cretpw@127.0.0.1:1/db"


@pytest.mark.parametrize(
    "args",
    [
        ["index", "pipelines/sample/eshop", "--index", URL],
        ["search", "orders", "--index", URL],
        ["worker", "--store", URL],
        ["store", "migrate", URL],
        ["runs", "--store", URL],
        ["submit", "pipelines/code_qa.yaml", "--input", "question=q", "--store", URL],
    ],
    ids=lambda a: a[0] + ("-" + a[1] if a[0] == "store" else ""),
)
def test_a_missing_driver_is_a_coded_error(monkeypatch, args):
    for name in ("psycopg", "psycopg_pool", "procrastinate"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 1, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert "STORE_DRIVER_MISSING" in done.output + done.stderr
    assert "pip install 'step-runtime[postgres]'" in done.output + done.stderr
    assert "s3cretpw" not in done.output + done.stderr
