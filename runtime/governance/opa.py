"""The OPA access engine: a Rego policy behind OPA's data API, over HTTP.

`settings.access: {engine: opa, url: http://127.0.0.1:8181/v1/data/step_runtime/access/allowed,
timeout_seconds: 2}`. Each read is one `POST url` with
`{"input": {"subject": ..., "action": ..., "resources": [...]}}` (attributes only, never
text); the rule the URL names must evaluate to the ids it allows, a set (a JSON list):
`{"result": ["id", ...]}`. pipelines/access/policy.rego is the default rule written so.

Anything else denies every resource of the batch with ACCESS_ENGINE_FAILED, never allows:
a server that does not answer within `timeout_seconds` (a whole-request deadline), an
HTTP error status, a body that is not JSON, no `result` (OPA's answer for an undefined
rule), a result that is not a list of strings. An id the server names that was not asked
about allows nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.errors import RunError
from runtime.governance.access_policy import Decision, Resource, decision_id, failed
from runtime.governance.subject import Subject

DEFAULT_TIMEOUT = 2.0
MAX_BODY = 8 * 1024 * 1024  # an answer bigger than this is not a list of ids we asked about


def check_url(url: Any) -> str | None:
    """Why url cannot be OPA's data API, else None (never quoting it: it may hold a key)."""
    from runtime.net.secrets import url_credentials

    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return "must be an http(s) URL of OPA's data API (…/v1/data/...)"
    if "/v1/data" not in url:
        return "must name a rule under OPA's data API (…/v1/data/<package path>/<rule>)"
    why = url_credentials(url)
    if why is None and "@" in url.split("//", 1)[1].split("/", 1)[0]:
        why = "must not carry user credentials"
    return why


class OpaEngine:
    """One POST to OPA's data API per read."""

    name = "opa"
    per_resource = True

    def __init__(self, config: Mapping[str, Any], base_dir: str = ".") -> None:
        problem = check_url(config.get("url"))
        if problem:
            raise RunError(f"settings.access.url {problem}", code="ACCESS_POLICY_INVALID")
        self.url = str(config["url"])
        self.timeout = float(config.get("timeout_seconds", DEFAULT_TIMEOUT))
        self.calls = 0  # requests sent (benchmarks/access.py reports the cost per query)
        # One client for the engine's life: building one (its TLS context) cost 15 ms of a
        # 20 ms request. No pooled connections, so the deadline sees and can cut each one.
        self._client: Any = None
        self._lock = threading.Lock()

    def decide(
        self,
        subject: Subject,
        action: str,
        resources: Sequence[Resource],
        pinned: tuple[str, ...] | None,
    ) -> list[Decision]:
        """Ask OPA once for the batch; a failure of any kind denies it."""
        if not resources:
            return []
        body = {
            "input": {
                "subject": subject.to_dict(),
                "action": action,
                "resources": [r.to_dict() for r in resources],
            }
        }
        try:
            allowed = self._ask(body)
        except _Failure as exc:
            return failed(self.name, subject, action, resources, str(exc))
        out = []
        digest = subject.digest()
        for r in resources:
            ok = r.id in allowed
            why = "allowed by the OPA rule" if ok else "the OPA rule does not allow it"
            out.append(
                Decision(
                    decision_id(self.name, digest, action, r.id, ok),
                    self.name,
                    action,
                    ok,
                    why,
                    r.id,
                )
            )
        return out

    def _ask(self, body: dict[str, Any]) -> set[str]:
        import httpx

        from runtime.net.deadline import Deadline

        self.calls += 1
        client = self._http()
        try:
            with Deadline(self.timeout) as deadline:
                reply = client.post(
                    self.url,
                    json=body,
                    timeout=deadline.timeout(self.timeout, self.timeout),
                    extensions=deadline.extensions(),
                )
        except httpx.HTTPError as exc:
            raise _Failure(f"OPA did not answer ({type(exc).__name__})") from exc
        if reply.status_code != 200:
            raise _Failure(f"OPA answered HTTP {reply.status_code}")
        if len(reply.content) > MAX_BODY:
            raise _Failure("OPA's answer is too large")
        try:
            data = reply.json()
        except ValueError as exc:
            raise _Failure("OPA's answer is not JSON") from exc
        if not isinstance(data, dict) or "result" not in data:
            raise _Failure("OPA's answer has no result (is the rule defined?)")
        result = data["result"]
        if not isinstance(result, list) or not all(isinstance(x, str) for x in result):
            raise _Failure("OPA's result is not a list of allowed ids")
        return set(result)

    def _http(self) -> Any:
        import httpx

        from runtime.net.deadline import client_limits

        with self._lock:
            if self._client is None:
                self._client = httpx.Client(trust_env=False, limits=client_limits())
            return self._client


class _Failure(Exception):
    """OPA could not decide (the message never quotes the answer)."""
