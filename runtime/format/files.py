"""Reading files the user names: regular files only, size checked before reading, reads bounded.

A path on a command line or in `extends` may name /dev/zero, a FIFO or a 300 MB
file; each is refused with a coded problem in well under a second and without
reading more than the limit, instead of reading until memory runs out.
"""

from __future__ import annotations

import os
import stat

MAX_FILE_BYTES = 2 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bounded(
    path: str, limit: int = MAX_FILE_BYTES, too_large: str = "YAML_TOO_LARGE"
) -> tuple[bytes | None, tuple[str, str] | None]:
    """A file's bytes, or a (code, message) refusal: checked before reading, never past `limit`.

    Only regular files are read (a device such as /dev/zero, a FIFO or a socket would
    never end or never answer); the size is checked with stat first, and the read
    itself stops at limit + 1 bytes, so a file that grows meanwhile is refused too.
    """

    def refusal(info: os.stat_result) -> tuple[str, str] | None:
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "special")
            return "FILE_UNREADABLE", f"{path} is {kind}, not a regular file"
        if info.st_size > limit:
            return too_large, f"{path} is {info.st_size} bytes; the limit is {limit}"
        return None

    try:
        # stat before opening: opening a FIFO blocks, opening some devices acts
        problem = refusal(os.stat(path))
        if problem is not None:
            return None, problem
        # O_NONBLOCK: should the path become a FIFO after the stat, opening does not hang
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            problem = refusal(os.fstat(fh.fileno()))  # the file opened, whatever the path is now
            if problem is not None:
                return None, problem
            raw = fh.read(limit + 1)
    except FileNotFoundError:
        return None, ("FILE_NOT_FOUND", f"no such file: {path}")
    except OSError as exc:
        return None, ("FILE_UNREADABLE", f"cannot read {path}: {exc.strerror}")
    if len(raw) > limit:
        return None, (too_large, f"{path} is over {limit} bytes; the limit is {limit}")
    return raw, None


def shown_path(path: str | os.PathLike[str], like: str | None) -> str:
    """`path` as the user reads it: relative to the working directory when `like` is.

    `like` is the file the user named (a pipeline given as `pipes/child.yaml`); a path
    resolved from it (an `extends` target, a prompts folder) is then printed relative
    too, while a pipeline given by absolute path keeps absolute paths. The relative form
    is computed from the resolved path, so it names the same file whatever symlinks it
    went through.
    """
    text = os.fspath(path)
    if like is None or os.path.isabs(like) or not os.path.isabs(text):
        return text
    try:
        return os.path.relpath(text)
    except ValueError:  # another drive (Windows): no relative form
        return text
