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
@click.option(
    "--subject",
    "subject_text",
    metavar="JSON|@FILE",
    help="Who is asking: when FILE is indexed (in --index, or the default index), every "
    "node of it must be visible to this subject under the default rule, else ACCESS_DENIED "
    "(docs/access.md).",
)
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="The index FILE's labels are read from, a file or postgresql://... (with it, and no "
    "--subject, the caller is anonymous).",
)
@handle_errors
def inspect(
    file: str, tokenizer: str, as_json: bool, subject_text: str | None, index_path: str | None
) -> None:
    """Show kind, language, confidence, tokens, symbols, dependencies and the compact form."""
    if subject_text is not None or index_path is not None:
        _check_access(file, subject_text, index_path)
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


def _check_access(file: str, subject_text: str | None, index_path: str | None) -> None:
    """ACCESS_DENIED when the file's indexed nodes are not all visible to the subject."""
    from runtime.errors import RunError
    from runtime.governance.access_policy import BuiltinEngine, Resource
    from runtime.governance.subject import ANONYMOUS, parse_subject, read_subject_option
    from runtime.retrieval.indexes import index_location, is_url, open_index
    from runtime.retrieval.pgwrite import file_resources

    subject = (
        parse_subject(read_subject_option(subject_text), "--subject")
        if subject_text is not None
        else ANONYMOUS
    )
    path = index_location(index_path)
    if index_path is None and not is_url(path) and not Path(path).is_file():
        return  # no index: nothing labels the file
    store = open_index(path)
    found = file_resources(store, str(Path(file).resolve()))
    resources = [
        Resource(nid, "file", repo, snap, p, kind, tuple(labels))
        for nid, repo, snap, kind, p, labels in found
    ]
    denied = [
        d for d in BuiltinEngine().decide(subject, "inspect", resources, None) if not d.allowed
    ]
    if denied:
        # The count and the rule's reason; nothing of the file is read.
        raise RunError(
            f"{file}: {len(denied)} of its {len(resources)} indexed node(s) are not visible to "
            f"this subject ({denied[0].reason}); decision {denied[0].id}",
            code="ACCESS_DENIED",
        )
