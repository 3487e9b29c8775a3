"""Coded JSON errors of the server: {"error": {"code", "message"}} with the right HTTP status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime import codes
from runtime.errors import StepRuntimeError

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

# The HTTP status of each code the server answers with; any other code of a failed run is
# 500 (502 for the model category: the upstream model failed, not this server).
STATUS = {
    "SERVE_BAD_REQUEST": 400,
    "SERVE_SUBJECT_IN_BODY": 400,
    "SUBJECT_INVALID": 400,
    "INPUT_INVALID": 400,
    "SERVE_UNAUTHORIZED": 401,
    "SERVE_UNKNOWN_MODEL": 404,
    "SERVE_NOT_FOUND": 404,
    "RUN_NOT_FOUND": 404,
    "SERVE_BODY_TOO_LARGE": 413,
    "SERVE_BUSY": 429,
    "SERVE_NOT_RUNNING": 409,
    "RUN_CANCELLED": 499,
    "SERVE_DEADLINE": 504,
    "SERVE_INTERNAL": 500,
}


class ServeError(Exception):
    """A request refused by the server: a code of runtime/codes.py, a message, a status."""

    def __init__(
        self, code: str, message: str, *, status: int | None = None, headers: Any = None
    ) -> None:
        codes.get(code)  # an unknown code is a programming error
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or status_of(code)
        self.headers = dict(headers or {})


def status_of(code: str) -> int:
    """The HTTP status for a code."""
    if code in STATUS:
        return STATUS[code]
    if code.startswith("INPUT_"):
        return 400
    entry = codes.CODES.get(code)
    return 502 if entry is not None and entry.category == "model" else 500


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON error body."""
    return {"error": {"code": code, "message": message, **extra}}


def response(err: ServeError | StepRuntimeError) -> JSONResponse:
    """The JSON response of a refused request or a coded runtime error."""
    from starlette.responses import JSONResponse

    if isinstance(err, ServeError):
        return JSONResponse(body(err.code, err.message), err.status, headers=err.headers)
    return JSONResponse(body(err.code, err.message), status_of(err.code))
