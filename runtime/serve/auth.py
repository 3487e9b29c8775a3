"""Bearer tokens and the subjects they map to (`runtime serve --token-file/--subjects`).

A server bound to loopback needs no token; any other address refuses to start without one.
Tokens are compared with hmac.compare_digest against every known token (no early exit), and
a run's subject comes only from the caller's token name through the --subjects mapping.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.errors import InputError
from runtime.serve.errors import ServeError

ENV_TOKEN = "RUNTIME_SERVE_TOKEN"
DEFAULT_NAME = "default"  # the name of $RUNTIME_SERVE_TOKEN and of a one-token file


@dataclass(frozen=True)
class Auth:
    """Known tokens (name -> token) and subjects (name -> subject); no tokens: open."""

    tokens: Mapping[str, str] = field(default_factory=dict)
    subjects: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def required(self) -> bool:
        """True when requests must carry a token."""
        return bool(self.tokens)

    def caller(self, header: str | None) -> str | None:
        """The token name of an `Authorization: Bearer ...` header, or None if none matches."""
        if not header or not header.startswith("Bearer "):
            return None
        given = header[len("Bearer ") :].strip().encode()
        found = None
        for name, token in self.tokens.items():  # every token compared: no early exit
            if hmac.compare_digest(given, token.encode()) and found is None:
                found = name
        return found

    def subject(self, caller: str | None) -> dict[str, Any] | None:
        """The subject the server maps this caller to (None: no mapping, the pipeline's own)."""
        if caller is None:
            return None
        subject = self.subjects.get(caller)
        return dict(subject) if subject is not None else None

    def __repr__(self) -> str:  # never the tokens, whatever prints this object
        return f"Auth(tokens={sorted(self.tokens)}, subjects={sorted(self.subjects)})"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_tokens(path: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tokens from --token-file (lines `NAME TOKEN`, or one bare token) and $RUNTIME_SERVE_TOKEN."""
    env = os.environ if environ is None else environ
    tokens: dict[str, str] = {}
    if path is not None:
        try:
            text = Path(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ServeError(
                "SERVE_TOKEN_MISSING", f"cannot read the token file {path}: {type(exc).__name__}"
            ) from exc
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        for n, line in enumerate(lines, 1):
            parts = line.split()
            if len(parts) == 1 and len(lines) == 1:
                tokens[DEFAULT_NAME] = parts[0]
            elif len(parts) == 2:
                tokens[parts[0]] = parts[1]
            else:  # the line itself is not quoted: it may hold a token
                raise ServeError(
                    "SERVE_TOKEN_MISSING",
                    f"{path}, line {n}: expected `NAME TOKEN` (two fields, {len(parts)} given)",
                )
    if env.get(ENV_TOKEN, "").strip():
        tokens.setdefault(DEFAULT_NAME, env[ENV_TOKEN].strip())
    return tokens


def read_subjects(path: str | None, tokens: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The --subjects file: a JSON object mapping token names to subjects (docs/access.md)."""
    if path is None:
        return {}
    from runtime.governance.subject import parse_subject

    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ServeError("SERVE_SUBJECTS_INVALID", f"cannot read {path} as JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ServeError("SERVE_SUBJECTS_INVALID", f"{path}: expected an object of token names")
    out: dict[str, dict[str, Any]] = {}
    for name, subject in data.items():
        if name not in tokens:
            raise ServeError(
                "SERVE_SUBJECTS_INVALID",
                f"{path}: {name!r} names no token of the server (known: {sorted(tokens)})",
            )
        try:
            parse_subject(subject, f"{path}: {name}")
        except InputError as exc:  # SUBJECT_INVALID, reported under this file's code
            raise ServeError("SERVE_SUBJECTS_INVALID", str(exc)) from exc
        out[name] = dict(subject)
    return out


def configure(
    host: str,
    token_file: str | None,
    subjects_file: str | None,
    environ: Mapping[str, str] | None = None,
) -> Auth:
    """The server's auth: refuse (SERVE_TOKEN_MISSING) a non-loopback bind without a token."""
    tokens = read_tokens(token_file, environ)
    if not tokens and not is_loopback(host):
        raise ServeError(
            "SERVE_TOKEN_MISSING",
            f"binding {host} (not loopback) needs a bearer token: set ${ENV_TOKEN} or pass "
            "--token-file FILE",
        )
    return Auth(tokens=tokens, subjects=read_subjects(subjects_file, tokens))
