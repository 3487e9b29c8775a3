"""`runtime inspect`: what the runtime sees in a source file."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from runtime.cli._common import handle_errors


def inspect_text(text: str, path: str, encoding: str = "cl100k_base") -> dict[str, Any]:
    """The inspection record printed by `runtime inspect --json`."""
    import classifiers
    from runtime.context.tokens import get_counter

    counter = get_counter(encoding)
    c = classifiers.classify(text, path)
    ex = classifiers.extract(text, path)
    compacted = classifiers.compact(text, c.language, counter=counter)
    return {
        "path": path,
        "kind": c.kind,
        "language": c.language,
        "confidence": c.confidence,
        "reasons": list(c.reasons),
        "tokens": counter.count(text),
        "symbols": [{k: v for k, v in asdict(s).items() if k != "text"} for s in ex.symbols],
        "dependencies": [asdict(d) for d in ex.dependencies],
        "compact": {"text": compacted, "tokens": counter.count(compacted)},
    }


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tokenizer",
    default="cl100k_base",
    show_default=True,
    type=click.Choice(["cl100k_base", "o200k_base"]),
    help="Encoding for token counts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handle_errors
def inspect(file: str, tokenizer: str, as_json: bool) -> None:
    """Show kind, language, confidence, tokens, symbols, dependencies and the compact form."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(f"not UTF-8 text: {exc.reason}", param_hint="FILE") from exc
    info = inspect_text(text, file, tokenizer)
    if as_json:
        click.echo(json.dumps(info, indent=2, ensure_ascii=False))
        return
    click.echo(f"{file}: {info['kind']} ({info['language']}), confidence {info['confidence']}")
    for reason in info["reasons"]:
        click.echo(f"  - {reason}")
    click.echo(f"tokens: {info['tokens']} ({tokenizer})")
    click.echo(f"symbols ({len(info['symbols'])}):")
    for s in info["symbols"]:
        click.echo(
            f"  {s['kind']:<11} {s['qualified_name']}  [lines {s['start_line']}-{s['end_line']}]"
        )
    click.echo(f"dependencies ({len(info['dependencies'])}):")
    for d in info["dependencies"]:
        click.echo(f"  {d['from_qualified_name']} -{d['edge_type']}-> {d['to_name']}")
    c = info["compact"]
    click.echo(f"compact ({c['tokens']} tokens, {c['tokens'] / max(1, info['tokens']):.0%}):")
    click.echo(c["text"])
