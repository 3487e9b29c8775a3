"""Postgres URLs as every store reads them: which locations are one, and the password kept
out of what is shown (the run store, the index and the memory store share these)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

SCHEMES = ("postgresql://", "postgres://")


def is_url(location: str | None) -> bool:
    """Whether a --store, --index or memory location names a Postgres database."""
    return bool(location) and str(location).startswith(SCHEMES)


def display(url: str) -> str:
    """The URL with its password hidden (it appears in messages and `runtime runs`)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def scrub(text: str, url: str) -> str:
    """text without the URL's password (libpq may echo a connection string it cannot parse)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text
