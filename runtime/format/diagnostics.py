"""Diagnostics as data, and their renderers (text, json, github, sarif).

Renderers are pure functions of a list of `Diagnostic`; they know nothing of the
checks that produced them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from runtime import codes
from runtime.format.files import read_bounded

SEVERITIES = ("error", "warning")


@dataclass(frozen=True)
class Diagnostic:
    """One problem, positioned (1-based line and column) and coded."""

    code: str
    severity: str
    message: str
    file: str
    line: int
    column: int
    path: str = "$"
    hint: str = ""
    end_line: int = 0
    end_column: int = 0

    def sort_key(self) -> tuple[str, int, int, str, str]:
        """Stable order: file, line, column, code, message."""
        return (self.file, self.line, self.column, self.code, self.message)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `runtime validate --format json`."""
        d = asdict(self)
        d.pop("end_line")
        d.pop("end_column")
        return d


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Sorted and de-duplicated."""
    return sorted(set(diagnostics), key=Diagnostic.sort_key)


def counts(diagnostics: Sequence[Diagnostic]) -> tuple[int, int]:
    """(errors, warnings)."""
    errors = sum(1 for d in diagnostics if d.severity == "error")
    return errors, len(diagnostics) - errors


# --- text -------------------------------------------------------------------


def _source_line(file: str, line: int, cache: dict[str, list[str]]) -> str | None:
    if file not in cache:
        # Bounded: the file of a diagnostic may be /dev/zero or a 300 MB file (refused on load).
        raw, _problem = read_bounded(file)
        cache[file] = raw.decode("utf-8", errors="replace").splitlines() if raw else []
    lines = cache[file]
    return lines[line - 1] if 0 < line <= len(lines) else None


def render_text(diagnostics: Sequence[Diagnostic], *, color: bool = False) -> str:
    """`FILE:LINE:COL: error CODE message`, a caret snippet and the hint."""
    cache: dict[str, list[str]] = {}
    out: list[str] = []
    for d in diagnostics:
        sev = d.severity
        if color:
            sev = f"\x1b[{31 if sev == 'error' else 33}m{sev}\x1b[0m"
        out.append(f"{d.file}:{d.line}:{d.column}: {sev} {d.code} {d.message}")
        src = _source_line(d.file, d.line, cache)
        if src is not None:
            width = max(1, (d.end_column - d.column) if d.end_line == d.line else 1)
            width = min(width, max(1, len(src) - d.column + 1))
            out.append(f"  {d.line:>4} | {src}")
            out.append(f"       | {' ' * (d.column - 1)}{'^' * width}")
        if d.hint:
            out.append(f"       = hint: {d.hint}")
    errors, warnings = counts(diagnostics)
    if diagnostics:
        out.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(out)


# --- json -------------------------------------------------------------------


def render_json(diagnostics: Sequence[Diagnostic], files: Sequence[str]) -> str:
    """One object: files, counts and diagnostics."""
    errors, warnings = counts(diagnostics)
    return json.dumps(
        {
            "files": list(files),
            "errors": errors,
            "warnings": warnings,
            "diagnostics": [d.to_dict() for d in diagnostics],
        },
        indent=2,
    )


# --- GitHub Actions -----------------------------------------------------------


def _gh_escape(value: str, *, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def render_github(diagnostics: Sequence[Diagnostic]) -> str:
    """Workflow commands (`::error file=...,line=...::message`) for annotations."""
    lines = []
    for d in diagnostics:
        level = "error" if d.severity == "error" else "warning"
        props = (
            f"file={_gh_escape(d.file, prop=True)},line={d.line},col={d.column},"
            f"title={_gh_escape(d.code, prop=True)}"
        )
        message = d.message + (f" (hint: {d.hint})" if d.hint else "")
        lines.append(f"::{level} {props}::{_gh_escape(message)}")
    return "\n".join(lines)


# --- SARIF 2.1.0 ----------------------------------------------------------------


SRCROOT = "%SRCROOT%"


def _sarif_rule(name: str) -> dict[str, Any]:
    """A reportingDescriptor filled from the code table: descriptions, help, category tag."""
    entry = codes.CODES.get(name)
    if entry is None:  # not in the table (a plugin's code): say only what is known
        return {"id": name, "shortDescription": {"text": name}}
    explain = f"`runtime explain {name}` prints this entry; docs/errors.md lists every code."
    help_text = f"{entry.hint} {explain}" if entry.hint else explain
    full = f"{entry.summary} {entry.hint}" if entry.hint else entry.summary
    return {
        "id": name,
        "name": "".join(part.capitalize() for part in name.split("_")),
        "shortDescription": {"text": entry.summary},
        "fullDescription": {"text": full},
        "help": {
            "text": help_text,
            "markdown": f"**{name}** ({entry.category}): {entry.summary}\n\n{help_text}",
        },
        "properties": {"tags": [entry.category]},
    }


def sarif_location(file: str, base_dir: str | None = None) -> dict[str, str]:
    """An artifactLocation: a URI relative to %SRCROOT% (the working directory) or a file URI.

    A path inside base_dir becomes a percent-encoded relative reference with
    `uriBaseId`; a path outside it (absolute, or climbing out with `../`) becomes an
    absolute `file://` URI, as a raw path is not a URI.
    """
    base = Path(os.path.abspath(base_dir or os.getcwd()))
    full = Path(os.path.normpath(base / file))  # an absolute file stays as it is
    try:
        rel = full.relative_to(base)
    except ValueError:
        return {"uri": full.as_uri()}
    return {"uri": quote(PurePosixPath(*rel.parts).as_posix()), "uriBaseId": SRCROOT}


def sarif_text(text: str, base_dir: str | None = None) -> str:
    """Message text with every absolute path inside base_dir made relative to it.

    The locations are relative to `%SRCROOT%`; a message (or hint) naming a file by
    its absolute path would otherwise carry the local folder the locations leave out.
    A path outside the base stays absolute, as its location does.
    """
    base = os.path.abspath(base_dir or os.getcwd()).rstrip(os.sep) + os.sep
    return text.replace(base, "") if len(base) > 1 else text


def render_sarif(
    diagnostics: Sequence[Diagnostic], *, version: str = "0", base_dir: str | None = None
) -> str:
    """A SARIF 2.1.0 log with one run; rules come from the code table.

    Files are located relative to base_dir (default: the working directory) under
    `%SRCROOT%`; the base's own absolute URI is left out (`originalUriBaseIds` is
    optional), so the log is the same on every machine and names no local folder,
    in the locations and in the message text alike.
    """
    used = sorted({d.code for d in diagnostics})
    rules = [_sarif_rule(name) for name in used]
    index = {name: i for i, name in enumerate(used)}
    results = []
    for d in diagnostics:
        region: dict[str, int] = {"startLine": d.line, "startColumn": d.column}
        if d.end_line:
            region["endLine"] = d.end_line
            # Only a one-line region must not end before it starts.
            multi_line = d.end_line > d.line
            region["endColumn"] = d.end_column if multi_line else max(d.end_column, d.column)
        results.append(
            {
                "ruleId": d.code,
                "ruleIndex": index[d.code],
                "level": "error" if d.severity == "error" else "warning",
                "message": {
                    "text": sarif_text(d.message + (f" Hint: {d.hint}" if d.hint else ""), base_dir)
                },
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": sarif_location(d.file, base_dir),
                            "region": region,
                        },
                        "logicalLocations": [{"fullyQualifiedName": d.path}],
                    }
                ],
            }
        )
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "step-runtime",
                        "version": version,
                        "informationUri": "https://pypi.org/project/step-runtime/",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)


RENDERERS = ("text", "json", "github", "sarif")
