"""A server on 127.0.0.1 speaking OPA's data API with pipelines/access/policy.rego's rule.

No OPA binary installs from the registries this project uses (PyPI, npm, Debian), so the
OPA engine is tested against this: `POST /v1/data/step_runtime/access/allowed` with
`{"input": {...}}` answers `{"result": [ids]}`, the ids `allowed` holds under the Rego rule
(every label of a resource in the subject's clearance, every tenant of it the subject's).
Other paths answer `{}` as OPA does for an undefined document. `mode` makes it fail the
ways a real server can: "down" (500), "junk" (not JSON), "undefined" ({}), "shape" (a
result that is no list of ids), "slow" (holds the request until released).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.chat_support import LocalServer, QuietHandler

RULE_PATH = "/v1/data/step_runtime/access/allowed"


def rego_allowed(data: dict[str, Any]) -> list[str]:
    """pipelines/access/policy.rego's `allowed`, evaluated on an input document."""
    subject = data.get("subject") or {}
    clearance = set(subject.get("clearance") or [])
    tenant = subject.get("tenant")
    out = []
    for r in data.get("resources") or []:
        if all(label in clearance for label in r.get("labels") or []) and all(
            t == tenant for t in r.get("tenants") or []
        ):
            out.append(r["id"])
    return sorted(set(out))


class OpaServer(LocalServer):
    """OPA's data API for one rule; every request body is kept in `bodies`."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.json_body()
                server.bodies.append(body)
                if server.mode == "slow":
                    server.release.wait(10)
                if server.mode == "down":
                    return self._send(500, b'{"code": "internal_error"}')
                if server.mode == "junk":
                    return self._send(200, b"<html>not json</html>")
                if self.path != RULE_PATH or server.mode == "undefined":
                    return self._send(200, b"{}")
                if server.mode == "shape":
                    return self._send(200, b'{"result": true}')
                result = rego_allowed(body.get("input") or {})
                return self._send(200, json.dumps({"result": result}).encode())

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.listen(Handler)
        self.start()

    @property
    def rule_url(self) -> str:
        """The URL settings.access.url names."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{RULE_PATH}"

    def close(self) -> None:
        self.release.set()
        super().close()
