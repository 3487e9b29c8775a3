"""OPA's data API on 127.0.0.1, evaluating the shipped Rego with OPA's own engine.

No `opa` binary installs from the registries this project reaches (PyPI, npm, Debian;
the Go module proxy that would build one is not reachable from the project's machines),
but PyPI's opa-golib-python-bindings carries OPA's Rego engine itself: the Go package
github.com/open-policy-agent/opa/v1/rego (OPA v1.20.2) built as a C shared library, with
a ctypes wrapper. `OpaServer` loads pipelines/access/policy.rego into it unchanged and
answers `POST /v1/data/<path>` as `opa run --server` does: `{"result": value}` for a
defined document, `{}` for an undefined one, HTTP 500 `{"code": "internal_error"}` for an
evaluation error, 400 for a body that is not JSON.

The package declares Python >= 3.14 for its own build, but its wrapper is plain ctypes
and runs on the project's 3.11; so it is not a dependency of the project: `opa_bindings()`
fetches the wheel once with pip (hash-pinned, no dependencies) into
~/.cache/step-runtime-tests/opa/ and imports it from there.

`mode` makes the server fail the ways a real one can. Three are real OPA answers to the
URL the engine is given: "undefined" (a rule the policy does not define: `{}`), "shape"
(the package instead of its rule: an object, not a list of ids), "down" (a rule whose
evaluation fails: 500). Two are transport faults no Rego can cause: "junk" (a body that
is not JSON) and "slow" (the request held until released).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.chat_support import LocalServer, QuietHandler

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "pipelines" / "access" / "policy.rego"
RULE_PATH = "/v1/data/step_runtime/access/allowed"

PACKAGE = "opa-golib-python-bindings==0.4.4"
# PyPI's sha256 of the 0.4.4 Linux wheels: pip refuses any other file.
HASHES = (
    "d411c901e14b8c7c3023e23e4a944f4cf429c1d31baf80e959e57d11efbfd24a",  # x86_64
    "2becc213edd9bec00e366162889effd29becf0bf0adacfa9c2b43f4b9368f5f2",  # aarch64
)

# A complete rule with two values for two resources: OPA's evaluation fails
# (eval_conflict_error), which its server answers with HTTP 500.
BROKEN = """package step_runtime.broken

import rego.v1

allowed := r.id if {
	some r in input.resources
}
"""
MODE_PATHS = {
    "undefined": "/v1/data/step_runtime/access/not_a_rule",
    "shape": "/v1/data/step_runtime/access",
    "down": "/v1/data/step_runtime/broken/allowed",
}

_lock = threading.Lock()
_module: ModuleType | None = None


def opa_bindings() -> ModuleType:
    """The `opa_bindings` package (OPA's Rego engine), fetched once into the test cache."""
    global _module
    with _lock:
        if _module is None:
            _module = _load(_fetch())
        return _module


def _fetch() -> Path:
    import fcntl
    import subprocess
    import sys
    import tempfile
    import zipfile

    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = base / "step-runtime-tests" / "opa"
    unpacked = cache / PACKAGE.replace("==", "-")
    if (unpacked / "opa_bindings" / "libopabridge.so").is_file():
        return unpacked
    cache.mkdir(parents=True, exist_ok=True)
    # Test workers start together: one downloads, the others wait for it.
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (unpacked / "opa_bindings" / "libopabridge.so").is_file():
            return unpacked
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            pinned = Path(tmp) / "requirements.txt"
            pinned.write_text(PACKAGE + "".join(f" --hash=sha256:{h}" for h in HASHES) + "\n")
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--ignore-requires-python",  # see the module docstring
                    "--require-hashes",
                    "-q",
                    "-d",
                    tmp,
                    "-r",
                    str(pinned),
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                pytest.fail(f"cannot fetch {PACKAGE} from the package index: {done.stderr[-800:]}")
            [wheel] = Path(tmp).glob("opa_golib_python_bindings-*.whl")
            staging = Path(tmp) / "unpacked"
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(staging)
            staging.replace(unpacked)  # atomic: nobody sees half a package
    return unpacked


def _load(folder: Path) -> ModuleType:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "opa_bindings",
        folder / "opa_bindings" / "__init__.py",
        submodule_search_locations=[str(folder / "opa_bindings")],
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["opa_bindings"] = module
    spec.loader.exec_module(module)
    return module


class OpaServer(LocalServer):
    """OPA's data API over the given Rego files; every request body is kept in `bodies`."""

    def __init__(self, mode: str = "ok", policies: tuple[Path, ...] = (POLICY,)) -> None:
        self.mode = mode
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        opa = opa_bindings()
        self.engine = opa.OpaEngine()
        for path in policies:
            self.engine.add_policy(str(path), path.read_text())
        self.engine.add_policy("broken.rego", BROKEN)
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self._answer(400, {"code": "invalid_parameter"})
                server.bodies.append(body)
                if server.mode == "slow":
                    server.release.wait(10)
                if server.mode == "junk":
                    return self._send(200, b"<html>not json</html>")
                if not self.path.startswith("/v1/data"):
                    return self._answer(404, {"code": "resource_not_found"})
                path = self.path[len("/v1/data") :].strip("/").replace("/", ".")
                try:
                    value = server.evaluate(path, body.get("input"))
                except opa.OpaUndefinedError:
                    return self._answer(200, {})
                except opa.OpaError as exc:
                    return self._answer(500, {"code": "internal_error", "message": str(exc)})
                return self._answer(200, {"result": value})

            def _answer(self, status: int, document: dict[str, Any]) -> None:
                self._send(status, json.dumps(document).encode())

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.listen(Handler)
        self.start()

    def evaluate(self, path: str, input_document: Any) -> Any:
        """OPA's value of data.<path> for the input (OpaUndefinedError when undefined)."""
        return self.engine.eval_document(path, input_document)

    @property
    def rule_url(self) -> str:
        """The URL settings.access.url names (in a failing mode, the URL that fails so)."""
        port = self.httpd.server_address[1]
        return f"http://127.0.0.1:{port}{MODE_PATHS.get(self.mode, RULE_PATH)}"

    def close(self) -> None:
        self.release.set()
        super().close()
        self.engine.close()
