"""The exception tree. Every error carries a stable code from `runtime.codes`.

    StepRuntimeError                    base; .code, .message, .hint, .exit_code
    ├── PipelineInvalidError            configuration rejected; carries all diagnostics
    ├── LoadError                       one file could not be loaded (used inside the loader)
    ├── UsageError                      wrong command line or API use (exit code 2)
    ├── ActionContractError             an action author broke the action contract
    └── RunError                        run-time failure; .step_id, .attempt
        ├── InputError                  inputs missing, unknown, mistyped, too large or deep (exit 2)
        ├── StateError                  missing variables, protected fields, non-JSON values
        ├── MaxStepsExceededError
        ├── RunCancelledError
        ├── StoreError                  run store and node index failures
        ├── TokenizerError
        └── ModelError                  the LLM taxonomy (retryable by `retry`)
            ├── ContextOverflowError
            ├── InvalidStructuredOutputError
            ├── ModelOutputTruncatedError
            ├── ModelRateLimitedError
            ├── ModelTimeoutError
            ├── ModelAuthError
            └── ModelProviderError

Library code raises these; only the CLI edge turns them into output and exit codes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from runtime import codes


class Located(Protocol):
    """What an error needs of a diagnostic (the format layer's `Diagnostic` has it all)."""

    @property
    def code(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def column(self) -> int: ...


class StepRuntimeError(Exception):
    """Base of all step-runtime errors."""

    default_code: ClassVar[str] = "ACTION_FAILED"
    exit_code: ClassVar[int] = 1

    def __init__(
        self, message: str, *, code: str | None = None, hint: str | None = None, **details: Any
    ) -> None:
        self.code = code or self.default_code
        if self.code not in codes.CODES:
            raise ValueError(f"unknown error code {self.code!r}")
        self.message = message
        self.hint = hint if hint is not None else codes.CODES[self.code].hint
        self.details = details
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by `--json` outputs and the trace."""
        return {"code": self.code, "message": self.message}


class PipelineInvalidError(StepRuntimeError):
    """The pipeline was rejected before any step ran; holds every diagnostic."""

    default_code = "SCHEMA_INVALID"
    exit_code = 2

    def __init__(self, diagnostics: Sequence[Located]) -> None:
        errors = [d for d in diagnostics if d.severity == "error"]
        first = errors[0] if errors else (diagnostics[0] if diagnostics else None)
        msg = f"pipeline invalid: {len(errors)} error(s)"
        if first is not None:
            msg += f"; first: {first.file}:{first.line}:{first.column} {first.code} {first.message}"
        super().__init__(msg, code=first.code if first else "SCHEMA_INVALID")
        self.diagnostics: list[Any] = list(diagnostics)  # the format layer's Diagnostic objects


class LoadError(StepRuntimeError):
    """A file could not be loaded; carries a position when known."""

    default_code = "YAML_SYNTAX"

    def __init__(
        self,
        message: str,
        *,
        code: str,
        file: str = "",
        line: int = 1,
        column: int = 1,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, code=code, hint=hint)
        self.file, self.line, self.column = file, line, column


class UsageError(StepRuntimeError):
    """Wrong command line or API use."""

    default_code = "USAGE"
    exit_code = 2


class ActionContractError(StepRuntimeError):
    """An action implementation broke the action contract (a bug in the action)."""

    default_code = "ACTION_FAILED"


class RunError(StepRuntimeError):
    """A run-time failure inside a run; names the step and the attempt."""

    default_code = "ACTION_FAILED"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        step_id: str | None = None,
        attempt: int | None = None,
        hint: str | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, code=code, hint=hint, **details)
        self.step_id = step_id
        self.attempt = attempt

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: code, message and step id."""
        return {"code": self.code, "message": self.message, "step_id": self.step_id}


class InputError(RunError):
    """Inputs missing, unknown, of the wrong type, too large or too deep."""

    default_code = "INPUT_MISSING"
    # Raised before a run exists: the command line was wrong, like a usage error.
    exit_code = 2


class StateError(RunError):
    """A state variable is missing, protected, or not JSON-serialisable."""

    default_code = "VARIABLE_MISSING"


class MaxStepsExceededError(RunError):
    """The run exceeded max_steps."""

    default_code = "MAX_STEPS_EXCEEDED"


class RunCancelledError(RunError):
    """The run was cancelled from outside."""

    default_code = "RUN_CANCELLED"


class StoreError(RunError):
    """The run store or node index failed."""

    default_code = "STORE_ERROR"


_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def refuse_url(path: str, what: str) -> None:
    """Raise STORE_URL_UNSUPPORTED when a store path is a URL (it would become folders)."""
    match = _URL.match(path)
    if match:
        # Only the scheme is echoed: the rest of a database URL may hold a password.
        raise StoreError(
            f"{what} {match.group(1)}://... is a URL; only local SQLite files are supported "
            "(Postgres is not supported yet)",
            code="STORE_URL_UNSUPPORTED",
        )


class TokenizerError(RunError):
    """The tokenizer encoding is unknown or unavailable."""

    default_code = "TOKENIZER_UNAVAILABLE"


class ModelError(RunError):
    """Base of the LLM error taxonomy."""

    default_code = "MODEL_PROVIDER_ERROR"


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window."""

    default_code = "CONTEXT_OVERFLOW"


class InvalidStructuredOutputError(ModelError):
    """The model's reply is not valid JSON where JSON was required."""

    default_code = "INVALID_STRUCTURED_OUTPUT"


class ModelOutputTruncatedError(ModelError):
    """The reply was cut before the reserved output (on_truncated: fail)."""

    default_code = "MODEL_OUTPUT_TRUNCATED"


class ModelRateLimitedError(ModelError):
    """The server kept answering 429."""

    default_code = "MODEL_RATE_LIMITED"


class ModelTimeoutError(ModelError):
    """The server did not answer in time."""

    default_code = "MODEL_TIMEOUT"


class ModelAuthError(ModelError):
    """The server refused the credentials."""

    default_code = "MODEL_AUTH_ERROR"


class ModelProviderError(ModelError):
    """The server failed or answered malformed data."""

    default_code = "MODEL_PROVIDER_ERROR"
