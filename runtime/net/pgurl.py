"""Postgres URLs as every store reads them: which locations are one, and the password kept
out of what is shown (the run store, the index and the memory store share these)."""

from __future__ import annotations

import re
from urllib.parse import unquote_plus, urlsplit, urlunsplit

SCHEMES = ("postgresql://", "postgres://")


def is_url(location: str | None) -> bool:
    """Whether a --store, --index or memory location names a Postgres database."""
    return bool(location) and str(location).startswith(SCHEMES)


def display(url: str) -> str:
    """The URL with its password hidden (it appears in messages and `runtime runs`): the
    one after the user name and a `password=` query parameter (libpq reads both)."""
    parts = urlsplit(url)
    query = _QUERY_PASSWORD.sub(r"\1password=***", parts.query)
    if parts.password is None:
        return urlunsplit((*parts[:3], query, parts.fragment)) if query != parts.query else url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, query, parts.fragment))


def scrub(text: str, url: str) -> str:
    """text without the URL's passwords (libpq may echo a connection string it cannot parse)."""
    try:
        parts = urlsplit(url)
        secrets = [parts.password or ""]
    except ValueError:
        return text
    for match in _QUERY_PASSWORD.finditer(parts.query):
        secrets += [match.group(2), unquote_plus(match.group(2))]
    for secret in sorted({x for x in secrets if x}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


# A `password=` parameter of a URL's query, and its value (group 2).
_QUERY_PASSWORD = re.compile(r"(^|&)password=([^&]*)", re.IGNORECASE)
