"""`runtime lock`: write, check, diff, update and upgrade behaviour locks (docs/lock.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from runtime.cli._common import color_enabled, handle_errors

FORMATS = ("text", "json", "github", "sarif")


def _targets(paths: tuple[str, ...], name: str | None) -> list[tuple[str, str | None, bool]]:
    """(file, pack member name or None, named explicitly) for every pipeline to lock."""
    from runtime.format.loader import has_pipeline_root, pipelines_in, read_yaml
    from runtime.format.validation import expand_paths

    out: list[tuple[str, str | None, bool]] = []
    for given in paths:
        file, _, member = (
            given.partition("#")
            if "#" in given and not Path(given).exists()
            else (
                given,
                "",
                "",
            )
        )
        explicit = not Path(file).is_dir()
        for path in expand_paths([file]):
            yf = read_yaml(path)
            if not explicit and not has_pipeline_root(yf):
                continue
            docs, _problems = pipelines_in(yf)
            if not explicit:  # a base for `extends` is locked through the pipelines using it
                docs = [d for d in docs if d.data.get("abstract") is not True]
                if not docs:
                    continue
            wanted = member or name
            if wanted:
                out.append((path, wanted, explicit))
            elif len(docs) > 1:
                out.extend((path, d.name, explicit) for d in docs)
            else:
                out.append((path, None, explicit))
    return out


def _emit(diags: list[Any], fmt: str) -> None:
    from runtime.format import diagnostics as d

    if not diags:
        return
    if fmt == "json":
        click.echo(d.render_json(diags, sorted({x.file for x in diags})))
    elif fmt == "github":
        click.echo(d.render_github(diags))
    elif fmt == "sarif":
        from runtime.format.lock import runtime_version

        click.echo(d.render_sarif(diags, version=runtime_version()))
    else:
        click.echo(d.render_text(diags, color=color_enabled(sys.stdout)))


@click.command()
@click.argument("paths", nargs=-1)
@click.option("--name", help="The pipeline of a pack file to lock (as FILE#NAME).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Where to write the lock (default <file>.lock.json; one pipeline only).",
)
@click.option("--check", "mode", flag_value="check", help="Exit 1 on drift; write nothing.")
@click.option(
    "--diff", "mode", flag_value="diff", help="Print how the lock would change; exit 1 if it would."
)
@click.option(
    "--update", "mode", flag_value="update", help="Rewrite the lock after a reviewed change."
)
@click.option(
    "--upgrade",
    "mode",
    flag_value="upgrade",
    help="Write the new format from the older engine's lock (lock_version 1) beside the pipeline.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Output format of diagnostics.",
)
@handle_errors
def lock(
    paths: tuple[str, ...],
    name: str | None,
    out: str | None,
    mode: str | None,
    fmt: str,
) -> None:
    """Freeze what PATHS' pipelines do in lock files, or check them against their locks.

    Without a mode: write the lock when there is none; say so when it is current; exit 1
    naming each drift when it is not (review, then --update). A folder checks only the
    pipelines that have a lock or declare `compat_mode: locked`; a file named is always
    checked; no PATHS is the working directory (the pre-commit hook). Exit status: 0 current (or written), 1 drift or an invalid pipeline or lock,
    2 usage.
    """
    from runtime.contract.registry import default_registry
    from runtime.errors import PipelineInvalidError, UsageError
    from runtime.format import lock as lk
    from runtime.format.validation import load_pipeline

    targets = _targets(paths or (".",), name)
    if not targets:
        raise click.UsageError("no pipeline files found in the given paths")
    if out and len(targets) > 1:
        raise click.UsageError("--out needs exactly one pipeline")
    registry = default_registry()
    diags: list[Any] = []
    failed = False
    for file, member, explicit in targets:
        shown = f"{file}#{member}" if member else file
        try:
            pipeline = load_pipeline(
                file, name=member, registry=registry, for_execution=False, locked=None
            )
        except PipelineInvalidError as exc:
            diags.extend(exc.diagnostics)
            failed = True
            continue
        except UsageError as exc:
            raise click.UsageError(str(exc)) from exc
        target = Path(out) if out else lk.lock_path(file, member)
        exists = target.exists()  # a folder there is an unreadable lock, not a missing one
        if not exists and not explicit and not lk.is_locked(pipeline):
            continue  # found in a folder, never locked: nothing to check
        new = lk.build(pipeline, registry)
        text = lk.render(new)
        if mode == "upgrade":
            failed |= _upgrade(pipeline, registry, target, text, diags, shown)
            continue
        if not exists:
            if mode in ("check", "diff"):
                diags.extend(lk.check(pipeline, registry, target))
                failed = True
                continue
            _write(target, text)
            click.echo(
                f"wrote {target} ({len(new['resolved'].get('steps') or [])} steps, "
                f"{len(new['prompts'])} prompts)",
                err=fmt != "text",
            )
            continue
        try:
            old = lk.read(target)
        except lk.LockError as exc:
            if mode == "update":
                _write(target, text)
                click.echo(f"rewrote {target} (it was unreadable: {exc})", err=fmt != "text")
                continue
            diags.extend(lk.check(pipeline, registry, target))
            failed = True
            continue
        if old.get("lock_version") == lk.LEGACY_VERSION:
            if mode == "update":  # a reviewed change: the new format replaces the old lock
                _write(target, text)
                click.echo(
                    f"replaced {target} (the older engine's lock_version 1) with lock_version "
                    f"{lk.LOCK_VERSION}",
                    err=fmt != "text",
                )
                continue
            found = list(lk.legacy_check(pipeline, registry, old, target))
            diags.extend(found)
            failed |= any(d.severity == "error" for d in found)
            continue
        drifted = lk.drift(old, new, pipeline, target)
        if mode == "diff":
            if drifted:
                _print_diff(target, lk.render(old), text)
                failed = True
            continue
        if mode == "update":
            if drifted or target.read_text(encoding="utf-8") != text:
                _write(target, text)
                click.echo(f"updated {target} ({len(drifted)} changes)", err=fmt != "text")
            else:
                click.echo(f"{target} is current", err=fmt != "text")
            continue
        if drifted:
            diags.extend(drifted)
            failed = True
        elif fmt == "text":
            click.echo(f"{shown}: {target} is current")
    _emit(diags, fmt)
    sys.exit(1 if failed else 0)


def _write(target: Path, text: str) -> None:
    """Write a lock file, or a usage error naming it (a folder there, no such folder)."""
    from runtime.errors import UsageError

    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the lock to {target}: {exc.strerror or exc}") from exc


def _upgrade(
    pipeline: Any, registry: Any, target: Path, text: str, diags: list[Any], shown: str
) -> bool:
    """Write the new lock over an older engine's one that the pipeline satisfies."""
    from runtime.format import lock as lk

    if not target.is_file():
        raise click.UsageError(f"{shown}: no lock to upgrade at {target}")
    old = lk.read(target)
    if old.get("lock_version") != lk.LEGACY_VERSION:
        click.echo(f"{target} is already lock_version {old.get('lock_version')}")
        return False
    found = list(lk.legacy_check(pipeline, registry, old, target))
    errors = [d for d in found if d.severity == "error"]
    if errors:  # the pipeline no longer does what the old lock froze: fix that first
        diags.extend(found)
        return True
    _write(target, text)
    click.echo(f"upgraded {target} to lock_version {lk.LOCK_VERSION}; it held: {found[-1].message}")
    return False


def _print_diff(target: Path, old: str, new: str) -> None:
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"{target} (locked)",
        tofile=f"{target} (now)",
    )
    click.echo("".join(lines), nl=False)
