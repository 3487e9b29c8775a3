"""Generated documentation and artefacts: the error table, the CLI reference, the schema file.

`python -m runtime.docgen` rewrites them; tests fail when a checked-in copy is stale.
Action pages keep hand-written prose, and their field table between
`<!-- fields:start -->` and `<!-- fields:end -->` is generated from the schema;
the state defaults table of docs/format.md (between `<!-- defaults:start -->` and
`<!-- defaults:end -->`) from the actions' `defaults`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from runtime import codes
from runtime.contract.registry import Registry, default_registry

ROOT = Path(__file__).resolve().parent.parent
_FIELDS = re.compile(r"(<!-- fields:start -->\n).*?(<!-- fields:end -->)", re.S)
_DEFAULTS = re.compile(r"(<!-- defaults:start -->\n).*?(<!-- defaults:end -->)", re.S)


def errors_md() -> str:
    """docs/errors.md: every code in one table, grouped by category."""
    out = [
        "# Error and diagnostic codes",
        "",
        "Generated from `runtime/codes.py` by `python -m runtime.docgen`; do not edit by hand.",
        "Codes are stable and never reused. `runtime explain CODE` prints one entry.",
        "",
    ]
    titles = {
        "load": "Loading (YAML, files, `extends`)",
        "schema": "Schema",
        "graph": "Graph and semantic checks",
        "run": "Run time",
        "model": "Model calls",
        "usage": "Usage",
    }
    for cat, title in titles.items():
        out += [f"## {title}", "", "| code | meaning | hint |", "|---|---|---|"]
        for c in codes.CODES.values():
            if c.category == cat:
                name = f"~~`{c.name}`~~ (removed)" if c.removed else f"`{c.name}`"
                out.append(f"| {name} | {c.summary} | {c.hint} |".replace("\n", " "))
        out.append("")
    return "\n".join(out)


def cli_md() -> str:
    """docs/cli.md: the --help text of every command."""
    import click

    from runtime.cli import COMMANDS, cli

    out = [
        "# Command line",
        "",
        "Generated from `--help` by `python -m runtime.docgen`; do not edit by hand.",
        "Exit codes: 0 success, 1 errors (validation errors, a failed run), 2 usage errors.",
        "",
        "## runtime",
        "",
        "```",
        _help(cli, "runtime"),
        "```",
        "",
    ]
    ctx = click.Context(cli, info_name="runtime")
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if command is None:
            continue
        out += [f"## runtime {name}", "", "```", _help(command, f"runtime {name}"), "```", ""]
    return "\n".join(out)


def _help(command: Any, name: str) -> str:
    import click

    with click.Context(command, info_name=name, terminal_width=100, max_content_width=100) as ctx:
        return command.get_help(ctx)


def schema_json(registry: Registry | None = None) -> str:
    """schemas/pipeline.schema.json."""
    from runtime.format.schema import document_schema, render

    return render(document_schema(registry or default_registry()))


def cases_schema_json() -> str:
    """schemas/cases.schema.json (runtime eval's cases files)."""
    from runtime.eval.cases import cases_schema
    from runtime.format.schema import render

    return render(cases_schema())


def field_table(action: Any) -> str:
    """A Markdown table of an action's step fields, from its schema."""
    rows = ["| field | type | required | description |", "|---|---|---|---|"]
    for name, schema in action.fields.items():
        kind = schema.get("type") or ("enum" if "enum" in schema else "see schema")
        if "enum" in schema:
            kind = " \\| ".join(f"`{v}`" for v in schema["enum"])
        elif isinstance(kind, list):
            kind = " or ".join(kind)
        req = "yes" if name in action.required else ""
        desc = str(schema.get("description", "")).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {kind} | {req} | {desc} |")
    return "\n".join(rows) + "\n"


def action_pages(registry: Registry | None = None) -> dict[Path, str]:
    """Action pages whose generated field table is out of date -> their new text."""
    registry = registry or default_registry()
    changed: dict[Path, str] = {}
    for name in registry.names():
        page = ROOT / "docs" / "actions" / f"{name}.md"
        action = registry.get(name)
        if not page.is_file() or action is None:
            continue
        text = page.read_text(encoding="utf-8")
        table = field_table(action)
        new = _FIELDS.sub(lambda m: m.group(1) + table + m.group(2), text)  # noqa: B023
        if new != text:
            changed[page] = new
    return changed


def defaults_table(registry: Registry | None = None) -> str:
    """A Markdown table of the state defaults the registered actions declare."""
    import json

    registry = registry or default_registry()
    found: dict[str, tuple[str, list[str]]] = {}
    for name in registry.names():
        action = registry.get(name)
        for var, value in (action.defaults if action else {}).items():
            text = json.dumps(value, sort_keys=True)
            found.setdefault(var, (text, []))[1].append(f"`{name}`")
    rows = ["| variable | starts as | declared by |", "|---|---|---|"]
    for var in sorted(found):
        text, owners = found[var]
        rows.append(f"| `{var}` | `{text}` | {', '.join(owners)} |")
    return "\n".join(rows) + "\n"


def format_page(registry: Registry | None = None) -> dict[Path, str]:
    """docs/format.md with its generated defaults table, when that is out of date."""
    page = ROOT / "docs" / "format.md"
    text = page.read_text(encoding="utf-8")
    table = defaults_table(registry)
    new = _DEFAULTS.sub(lambda m: m.group(1) + table + m.group(2), text)
    return {page: new} if new != text else {}


def outputs() -> dict[Path, str]:
    """Every generated file and its expected content."""
    files = {
        ROOT / "docs" / "errors.md": errors_md(),
        ROOT / "docs" / "cli.md": cli_md(),
        ROOT / "schemas" / "pipeline.schema.json": schema_json(),
        ROOT / "schemas" / "cases.schema.json": cases_schema_json(),
    }
    files.update(action_pages())
    files.update(format_page())
    return files


def main() -> int:
    """Rewrite every generated file; print what changed."""
    for path, text in outputs().items():
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
