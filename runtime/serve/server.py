"""What the server's routes share: the runs going, the run store's read API, auth, limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.serve.auth import Auth
from runtime.serve.limits import Limits, read_json
from runtime.serve.runs import RunsService
from runtime.serve.served import Runs

if TYPE_CHECKING:
    from starlette.requests import Request


@dataclass
class Server:
    """What the routes share: the runs going, the store's read API, auth and limits."""

    runs: Runs
    service: RunsService
    auth: Auth = field(default_factory=Auth)
    limits: Limits = field(default_factory=Limits)

    async def read_json(self, request: Request) -> dict[str, Any]:
        """The request's JSON object, within the body limit."""
        return await read_json(request, self.limits.max_body_bytes)

    def subject_of(self, request: Request) -> dict[str, Any] | None:
        """The run's subject: the server's mapping of the authenticated caller, never the body."""
        return self.auth.subject(request.scope.get("state", {}).get("caller"))
