"""`runtime eval`: run a pipeline over evaluation cases and report, compare and gate."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from runtime.cli._common import handle_errors, shown


def _cases_or_exit(path: str) -> Any:
    from runtime.eval.cases import CasesInvalidError, load_cases
    from runtime.format.diagnostics import render_text

    try:
        return load_cases(path)
    except CasesInvalidError as exc:
        click.echo(render_text(exc.diagnostics), err=True)
        sys.exit(2)


def _store(index_path: str | None, cases: Any) -> Any:
    """--index, else the cases' corpus indexed (incrementally) under .runtime/eval/."""
    from runtime.retrieval.indexes import open_index
    from runtime.retrieval.nodestore import open_store

    if index_path:  # a file or postgresql://... (runtime/retrieval/indexes.py)
        return open_index(index_path)
    if cases.corpus is None:
        return open_index(None)
    from runtime.retrieval.indexer import index_paths

    repo = cases.corpus.get("repository") or Path(cases.corpus["path"]).name
    # The name comes from the cases file: only letters, digits, _ - . and no leading dot,
    # so it never names a file outside .runtime/eval/.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", repo).lstrip(".") or "corpus"
    path = Path(".runtime") / "eval" / f"{safe}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    store = open_store(str(path), create=True)
    index_paths(
        store,
        [cases.corpus["path"]],
        repository=repo,
        snapshot=cases.corpus.get("snapshot", "main"),
    )
    return store


def _scope(cases: Any) -> Any:
    from runtime.retrieval.node import Scope

    return Scope(cases.repository, cases.snapshot)


class _Bar:
    """A progress bar on stderr while runs go on (a terminal only; rich loads then)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self._p: Any = None
        self._task: Any = None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            from runtime.cli._common import color_enabled

            console = Console(stderr=True, no_color=not color_enabled(sys.stderr))
            self._p = Progress(
                TextColumn("eval"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                console=console,
                transient=True,
            )
            self._p.start()
            self._task = self._p.add_task("", total=self.total)
        return self

    def advance(self, job: Any, record: dict[str, Any]) -> None:
        """One run done."""
        if self._p is not None:
            label = shown(f"{job.case.id} {job.variant.id}", lines=False)[:60]
            self._p.update(self._task, advance=1, description=label)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()


@click.command("eval")
@click.argument("paths", nargs=-1, required=True, metavar="PIPELINE CASES | --retrieval CASES...")
@click.option(
    "--retrieval",
    is_flag=True,
    help="Measure the search step alone on the cases (recall@k, MRR, nDCG) per mode.",
)
@click.option(
    "--modes",
    default="bm25,semantic,hybrid",
    show_default=True,
    help="With --retrieval: the search modes.",
)
@click.option(
    "--k",
    "k",
    type=click.IntRange(min=1, max=100),
    default=5,
    show_default=True,
    help="With --retrieval: hits per search for recall@k.",
)
@click.option(
    "--model",
    "model_spec",
    help="Model for every call_model step (as for exec; default: the pipeline's).",
)
@click.option(
    "--index",
    "index_path",
    type=click.Path(dir_okay=False),
    help="Node index (default: the cases' corpus, else $RUNTIME_INDEX or .runtime/index.db).",
)
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    help="Run store: a file or postgresql://... (default $RUNTIME_STORE or .runtime/runs.db).",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1, max=1000),
    default=1,
    show_default=True,
    help="Runs per case and variant.",
)
@click.option(
    "--jobs", type=click.IntRange(min=1, max=64), default=1, show_default=True, help="Runs at once."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Write report.json, report.html and the two PNG curves here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print report.json instead of the table.")
@click.option(
    "--min-evidence-recall",
    type=click.FloatRange(0, 1),
    help="Exit 1 when the mean evidence recall is lower.",
)
@click.option(
    "--min-fact-coverage",
    type=click.FloatRange(0, 1),
    help="Exit 1 when the mean fact coverage is lower.",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, exists=True),
    help="A report.json to compare with: any quality drop is a regression (exit 1).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Drops up to this much are not regressions.",
)
@handle_errors
def eval_(
    paths: tuple[str, ...],
    retrieval: bool,
    modes: str,
    k: int,
    model_spec: str | None,
    index_path: str | None,
    store: str | None,
    repeat: int,
    jobs: int,
    out_dir: str | None,
    as_json: bool,
    min_evidence_recall: float | None,
    min_fact_coverage: float | None,
    baseline: str | None,
    tolerance: float,
) -> None:
    """Run PIPELINE once per case, variant and repeat of CASES and report what it did.

    Each run is stored like any run (runtime runs, runtime context RUN_ID). The table
    shows each case and the aggregate (95% intervals over repeats); --out also writes
    report.json, report.html, context_rot.png and position.png (docs/eval.md).

    Exit status: 0 passed, 1 a threshold or --baseline regression failed, 2 invalid
    cases, pipeline or usage.
    """
    from runtime.errors import UsageError

    if retrieval:
        _retrieval(paths, modes, k, index_path, as_json)
        return
    if len(paths) != 2:
        raise UsageError("give PIPELINE and CASES (or --retrieval CASES...)", code="USAGE")
    from runtime.cli.run import _check_model, _load_or_exit
    from runtime.engine.services import Services
    from runtime.engine.stores import open_run_store
    from runtime.eval import report as rep
    from runtime.eval.runner import EvalSetup, Evaluator, jobs_of

    pipeline_path, cases_path = paths
    pipeline = _load_or_exit(pipeline_path)
    cases = _cases_or_exit(cases_path)
    base = rep.load_baseline(baseline) if baseline else None
    if model_spec:
        _check_model(
            Services(
                settings=pipeline.settings, model_spec=model_spec, base_dir=str(pipeline.base_dir)
            )
        )
    node_store = _store(index_path, cases)
    extra = {"repository": cases.repository} if cases.repository else {}
    setup = EvalSetup(pipeline, node_store, open_run_store(store), model_spec, _scope(cases), extra)
    evaluator = Evaluator(setup)
    evaluator.prepare(cases)
    todo = jobs_of(cases, repeat)
    with _Bar(len(todo), sys.stderr.isatty() and not as_json) as bar:
        runs = evaluator.run_all(todo, jobs, bar.advance)
    model = model_spec or _default_model(pipeline)
    report = rep.build(
        runs, pipeline=pipeline_path, cases_file=cases_path, model=model, repeat=repeat
    )
    failures = rep.check_thresholds(
        report, {"evidence_recall": min_evidence_recall, "fact_coverage": min_fact_coverage}
    )
    regressions = rep.compare(report, base, tolerance) if base is not None else []
    report["passed"] = not failures and not regressions
    written = _write(Path(out_dir), report) if out_dir else []
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        click.echo(rep.table(report, lambda s: shown(s, lines=False)))
        if out_dir:
            click.echo(f"wrote {', '.join(written)} in {out_dir}", err=True)
    for f in failures:
        click.echo(f"threshold: {f}", err=True)
    for cid in report.get("baseline_cases_missing") or ():
        click.echo(f"note: case {shown(cid, lines=False)} of the baseline was not run", err=True)
    for r in regressions:
        click.echo(
            f"regression: {shown(r['case'], lines=False)}: {r['metric']} {r['baseline']:.3f} -> "
            f"{r['current']:.3f} ({r['delta']:+.3f})",
            err=True,
        )
    sys.exit(0 if report["passed"] else 1)


def _default_model(pipeline: Any) -> str:
    """What the runs used without --model: settings.default_model, else the extractive responder."""
    return str(pipeline.settings.get("default_model") or "extractive")


def _write(out: Path, report: dict[str, Any]) -> list[str]:
    """report.json, the two curves (when matplotlib is there) and report.html."""
    from runtime.eval import html, plots

    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    drawn: dict[str, Path | None] = {"context_rot": None, "position": None}
    if plots.available():
        rot, pos = out / "context_rot.png", out / "position.png"
        plots.context_rot(report["curves"], rot)
        plots.position(report["curves"], pos)
        drawn = {"context_rot": rot, "position": pos}
    else:
        click.echo(
            "warning: EVAL_PLOTS_UNAVAILABLE: matplotlib is not installed, so no PNG was "
            "written; pip install 'step-runtime[eval]'",
            err=True,
        )
    (out / "report.html").write_text(html.render(report, drawn), encoding="utf-8")
    return ["report.json", "report.html"] + [f"{k}.png" for k, v in drawn.items() if v]


def _retrieval(
    paths: tuple[str, ...], modes: str, k: int, index_path: str | None, as_json: bool
) -> None:
    from runtime.errors import UsageError
    from runtime.eval import retrieval

    wanted = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in retrieval.MODES]
    if unknown or not wanted:
        raise UsageError(
            f"--modes: unknown {', '.join(unknown) or 'none given'}; valid: {', '.join(retrieval.MODES)}",
            code="USAGE",
        )
    files = [_cases_or_exit(p) for p in paths]
    results = []
    for cases in files:
        store = _store(index_path, cases)
        results.append(retrieval.evaluate(store, _scope(cases), cases, wanted, k))
    merged = retrieval.merge(results)
    if as_json:
        click.echo(json.dumps(merged, indent=2, ensure_ascii=False))
    else:
        click.echo(shown(retrieval.table(merged)))
