"""Resource bombs on the validate/load side: refused before reading, with coded errors.

/dev/zero never ends, a FIFO never answers, a 300 MB sparse file costs nothing on
disk: each is refused from its stat (the read itself is bounded too), so neither
memory nor time grows with what the path names. `--inputs` limits are in
tests/cli (helper D's part of the same issue).
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

import runtime
from runtime.cli import cli
from runtime.format.files import MAX_FILE_BYTES

HINT = "       = hint: Split the pipeline or remove alias expansion (a 'billion laughs' document is refused)."


def _validate(*paths: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", *paths])
    return result.exit_code, result.output


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_is_refused_unread():
    assert _validate("/dev/zero") == (
        1,
        "/dev/zero:1:1: error FILE_UNREADABLE /dev/zero is a character device, not a regular file\n"
        "1 error(s), 0 warning(s)\n",
    )


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    code, out = _validate(str(fifo))
    assert (code, out.splitlines()[0]) == (
        1,
        f"{fifo}:1:1: error FILE_UNREADABLE {fifo} is a FIFO, not a regular file",
    )


def test_a_sparse_300_mb_file_is_refused_from_its_size_without_reading_it(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(300 * 1024 * 1024)  # sparse: no disk space, reads as zeros
    runtime.validate(str(tmp_path / "warm.yaml"))  # imports and the like, outside the count
    tracemalloc.start()
    try:
        report = runtime.validate(str(big))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(d.code, d.message) for d in report.diagnostics] == [
        ("YAML_TOO_LARGE", f"{big} is 314572800 bytes; the limit is {MAX_FILE_BYTES}")
    ]
    # Nothing of the file was read: the whole validation allocated less than the limit.
    assert peak < MAX_FILE_BYTES


def test_a_file_one_byte_over_the_limit_is_refused_and_one_at_it_is_read(tmp_path):
    at = tmp_path / "at.yaml"
    at.write_bytes(b"#" * MAX_FILE_BYTES)  # a comment only: read, then not a pipeline
    over = tmp_path / "over.yaml"
    over.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    report = runtime.validate(str(at), str(over))
    assert [(Path(d.file).name, d.code) for d in report.diagnostics] == [
        ("at.yaml", "YAML_NOT_A_PIPELINE"),
        ("over.yaml", "YAML_TOO_LARGE"),
    ]


def test_extends_naming_a_device_or_a_folder_is_reported_at_the_extends_line(tmp_path):
    (tmp_path / "sub").mkdir()
    child = tmp_path / "child.yaml"
    child.write_text("extends: ./sub\nname: c\n")
    report = runtime.validate(str(child))
    assert [(d.file, d.line, d.column, d.code, d.message) for d in report.diagnostics] == [
        (
            str(child),
            1,
            10,
            "FILE_UNREADABLE",
            f"extends names ./sub: {tmp_path / 'sub'} is a folder, not a regular file",
        )
    ]


def test_the_text_renderer_reads_no_more_of_a_file_than_the_loader(tmp_path):
    # A diagnostic located in a device or oversized file prints without its source line.
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(300 * 1024 * 1024)
    code, out = _validate(str(big))
    assert (code, out.splitlines()) == (
        1,
        [
            f"{big}:1:1: error YAML_TOO_LARGE {big} is 314572800 bytes; the limit is "
            f"{MAX_FILE_BYTES}",
            HINT,
            "1 error(s), 0 warning(s)",
        ],
    )
