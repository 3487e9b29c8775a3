"""A real PostgreSQL server for the tests: initdb into a temporary folder, stopped afterwards.

One server per test session (under pytest-xdist: one per worker process, each on its own
free port), a fresh database per test (`CREATE DATABASE ... TEMPLATE template0`, a few
milliseconds). The server runs as the unprivileged `postgres` user when the tests run as
root (initdb refuses root), listens on 127.0.0.1 and on a unix socket inside its folder,
and runs with fsync off: test data only. Without the binaries the tests that need it skip
with a message naming what is missing (`.ci/system-deps.sh` installs them).

    server = PostgresServer.start()
    url = server.create_database("t1")      # postgresql://postgres@127.0.0.1:PORT/t1
    server.stop(); server.restart()         # a store that goes away mid-run, and comes back
    server.close()                          # stop and remove the folder
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Where Debian puts PostgreSQL 15; STEP_RUNTIME_PG_BIN names another folder of binaries.
DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
USER = "postgres"


def bin_dir() -> Path | None:
    """The folder holding initdb and postgres, or None when there is none."""
    candidates = [os.environ.get("STEP_RUNTIME_PG_BIN", ""), DEFAULT_BIN]
    for found in (shutil.which("initdb"), shutil.which("postgres")):
        if found:
            candidates.append(str(Path(found).parent))
    for folder in candidates:
        if folder and (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    return None


def unavailable() -> str | None:
    """Why the Postgres tests cannot run here (a message for pytest.skip), or None."""
    if bin_dir() is None:
        return (
            "PostgreSQL binaries not found (initdb and postgres in "
            f"{DEFAULT_BIN}, $STEP_RUNTIME_PG_BIN or PATH): run .ci/system-deps.sh"
        )
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        return f"psycopg 3 / psycopg-pool not installed ({exc}): pip install -e '.[postgres]'"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam(USER)
        except KeyError:
            return f"running as root and there is no unprivileged {USER!r} user to run PostgreSQL"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _demote() -> tuple[Callable[[], None] | None, int | None, int | None]:
    """A preexec_fn running the child as `postgres` when we are root, and that user's ids."""
    if os.geteuid() != 0:
        return None, None, None
    import pwd

    entry = pwd.getpwnam(USER)
    uid, gid = entry.pw_uid, entry.pw_gid

    def preexec() -> None:
        os.setsid()  # its own process group: a test's Ctrl-C does not reach the server first
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return preexec, uid, gid


class PostgresServer:
    """One PostgreSQL server in a temporary folder, on a free port of 127.0.0.1."""

    def __init__(self, root: Path, port: int, bindir: Path) -> None:
        self.root = root
        self.port = port
        self.bindir = bindir
        self.data = root / "data"
        self.sockets = root / "sock"
        self.process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)

    @classmethod
    def start(cls, **settings: str) -> PostgresServer:
        """initdb and start a server; `settings` are extra `-c name=value` options."""
        bindir = bin_dir()
        if bindir is None:
            raise RuntimeError(unavailable() or "no PostgreSQL binaries")
        preexec, uid, gid = _demote()
        root = Path(tempfile.mkdtemp(prefix="step-runtime-pg-"))
        (root / "sock").mkdir()
        if uid is not None and gid is not None:
            for path in (root, root / "sock"):
                os.chown(path, uid, gid)
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        subprocess.run(
            [
                *(str(bindir / "initdb"), "-D", str(root / "data"), "-U", USER, "-A", "trust"),
                *("-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"),
            ],
            check=True,
            capture_output=True,
            preexec_fn=preexec,
            env=env,
            cwd=root,
        )
        server = cls(root, _free_port(), bindir)
        server._settings = settings
        server._launch()
        atexit.register(server.close)
        return server

    _settings: dict[str, str]

    def _launch(self) -> None:
        preexec, _, _ = _demote()
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.sockets),
            "fsync": "off",  # test data only: a crash of the machine loses nothing we keep
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "16MB",
            "max_connections": "200",
            "log_min_messages": "fatal",
            **self._settings,
        }
        args = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        for name, value in options.items():
            args += ["-c", f"{name}={value}"]
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen(
            args, stdout=log, stderr=log, preexec_fn=preexec, cwd=self.root
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"PostgreSQL exited with {self.process.returncode}: "
                    + (self.root / "server.log").read_text(errors="replace")[-2000:]
                )
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def url(self, database: str = "postgres") -> str:
        """A URL for one of the server's databases, over TCP on 127.0.0.1."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None, template: str = "template0") -> str:
        """A new empty database (named, or the next free name) and its URL."""
        import psycopg

        name = name or f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {template}')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, ending the sessions still connected to it."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @property
    def running(self) -> bool:
        """Whether the server process is up."""
        return self.process is not None and self.process.poll() is None

    def stop(self, how: str = "fast") -> None:
        """Stop the server (fast: end sessions and shut down; immediate: as if it crashed)."""
        if not self.running:
            return
        assert self.process is not None
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "smart": signal.SIGTERM}[how]
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        """Start the stopped server again on the same port and data."""
        if not self.running:
            self._launch()

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
