"""Run the mutant lists against the suite and print the kill rate and the survivors.

A mutant is one realistic one-place change to product code (a flipped comparison,
a dropped filter, an off-by-one at a budget), written by hand in a TOML list under
tests/mutation/mutants/. Each is applied to a private copy of the tree (the checkout
is never touched, so it is safe while other work goes on), then the fast suite runs
against that copy and stops at the first failure. A mutant no test kills is a
survivor: either a gap in the tests or, when it cannot change behaviour, marked
`equivalent = "why"` in its list.

    python tests/mutation/mutate.py                    # every list, 2 workers
    python tests/mutation/mutate.py tests/mutation/mutants/engine.toml --jobs 1
    python tests/mutation/mutate.py --match engine     # mutants whose file or why matches

Exit status: 0 when the kill rate (equivalent mutants left out) is at least
--min-score, else 1; 2 when a mutant list is stale (its `find` text is gone).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LISTS = ROOT / "tests" / "mutation" / "mutants"
# Everything at the top of the checkout is copied into each worker's tree (tests read
# README.md, .pre-commit-hooks.yaml, .ci/...) except these: the repository, the venv, build
# output and tool caches. Tests import product code from the copy (PYTHONPATH wins over
# the editable install's finder, which sits after the path finder).
NOT_COPIED = {
    ".git",
    ".venv",
    "build",
    "dist",
    ".runtime",
    ".hypothesis",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".grimp_cache",
    ".import_linter_cache",
}
# Style tests kill mutants for formatting, not behaviour; slow tests are left to CI, except
# those marked `pins` (more seeded cases of a property that pins a decision).
PYTEST = [
    "-x",
    "-q",
    "-p",
    "no:cacheprovider",
    "-m",
    "not slow or pins",
    "--ignore=tests/test_lint.py",
    "--ignore=tests/mutation",
]


@dataclass
class Mutant:
    """One change: replace the `occurrence`-th `find` in `file` by `replace`."""

    source: str
    file: str
    find: str
    replace: str
    why: str
    occurrence: int | None = None
    equivalent: str | None = None
    tests: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.file}: {self.why}"


def load_mutants(paths: list[Path]) -> list[Mutant]:
    """Read every `[[mutant]]` table of the given lists."""
    out = []
    for path in paths:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for row in data.get("mutant", []):
            out.append(Mutant(source=path.name, **row))
    return out


def apply(text: str, m: Mutant) -> str:
    """The file's text with the mutant applied; ValueError when `find` is ambiguous or gone."""
    count = text.count(m.find)
    if count == 0:
        raise ValueError("find text not in file")
    if m.occurrence is None and count > 1:
        raise ValueError(f"find text occurs {count} times; give occurrence")
    n = m.occurrence or 1
    if n > count:
        raise ValueError(f"occurrence {n} but only {count} found")
    start = -1
    for _ in range(n):
        start = text.index(m.find, start + 1)
    mutated = text[:start] + m.replace + text[start + len(m.find) :]
    if mutated == text:
        raise ValueError("replace equals find")
    return mutated


def check_lists(mutants: list[Mutant]) -> list[str]:
    """Stale entries: a file or a `find` that no longer matches the tree."""
    problems = []
    for m in mutants:
        path = ROOT / m.file
        if not path.is_file():
            problems.append(f"{m.source}: {m.file}: no such file ({m.why})")
            continue
        try:
            apply(path.read_text(encoding="utf-8"), m)
        except ValueError as exc:
            problems.append(f"{m.source}: {m.label}: {exc}")
    return problems


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for src in sorted(ROOT.iterdir()):
        name = src.name
        if name in NOT_COPIED or name.endswith(".egg-info"):
            continue
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, dest / name)


def _pytest(tree: Path, tests: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PYTHONDONTWRITEBYTECODE": "1",
        "STEP_RUNTIME_TESTS_NO_BYTECODE": "1",  # tests/conftest.py would turn bytecode on
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST, *tests],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run_one(tree: Path, m: Mutant, timeout: float) -> tuple[str, float, str]:
    target = tree / m.file
    original = target.read_text(encoding="utf-8")
    target.write_text(apply(original, m), encoding="utf-8")
    started = time.perf_counter()
    try:
        done = _pytest(tree, m.tests or ["tests"], timeout)
        status = "survived" if done.returncode == 0 else "killed"
        if done.returncode in (2, 3, 4):  # interrupted, internal or usage error: say so
            status = "error"
        tail = "\n".join(done.stdout.strip().splitlines()[-3:])
    except subprocess.TimeoutExpired:
        status, tail = "killed", "timeout (the mutant hangs the suite)"
    finally:
        target.write_text(original, encoding="utf-8")
    return status, time.perf_counter() - started, tail


def run(
    mutants: list[Mutant], jobs: int, timeout: float
) -> Iterator[tuple[Mutant, str, float, str]]:
    """Run each mutant in one of `jobs` private trees; yield results as they finish."""
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        trees = []
        for i in range(jobs):
            tree = Path(tmp) / f"w{i}"
            tree.mkdir()
            _copy_tree(tree)
            trees.append(tree)
        # A kill means nothing on a red suite: every selection must pass unmutated first.
        selections = sorted({tuple(m.tests or ["tests"]) for m in mutants})
        union = sorted({t for sel in selections for t in sel})
        baseline = _pytest(trees[0], union, timeout * 4)
        if baseline.returncode != 0:
            tail = "\n".join(baseline.stdout.strip().splitlines()[-15:])
            raise SystemExit(f"the unmutated suite fails; fix it before mutating:\n{tail}")
        free = list(trees)
        import threading

        lock = threading.Lock()

        def work(m: Mutant) -> tuple[Mutant, str, float, str]:
            with lock:
                tree = free.pop()
            try:
                return (m, *_run_one(tree, m, timeout))
            finally:
                with lock:
                    free.append(tree)

        with ThreadPoolExecutor(jobs) as pool:
            yield from pool.map(work, mutants)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lists", nargs="*", type=Path, help="mutant lists (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--match", help="only mutants whose file or why contains this")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant")
    ap.add_argument("--min-score", type=float, default=80.0, help="percent, equivalents left out")
    ap.add_argument("--check", action="store_true", help="only check that every list applies")
    args = ap.parse_args(argv)

    lists = args.lists or sorted(LISTS.glob("*.toml"))
    mutants = load_mutants(lists)
    if args.match:
        mutants = [m for m in mutants if args.match in m.file or args.match in m.why]
    stale = check_lists(mutants)
    if stale:
        print("stale mutants (fix the list before running):", *stale, sep="\n  ")
        return 2
    if args.check:
        print(f"{len(mutants)} mutants apply cleanly")
        return 0

    counts = {"killed": 0, "survived": 0, "error": 0}
    survivors: list[Mutant] = []
    equivalent_survivors: list[Mutant] = []
    equivalent_killed: list[Mutant] = []
    started = time.perf_counter()
    for m, status, secs, tail in run(mutants, args.jobs, args.timeout):
        counts[status] += 1
        mark = {"killed": "x", "survived": "SURVIVED", "error": "ERROR"}[status]
        print(f"{mark:>8}  {secs:5.1f}s  {m.label}", flush=True)
        if status == "error":
            print("          " + tail.replace("\n", "\n          "))
        if status == "survived":
            (equivalent_survivors if m.equivalent else survivors).append(m)
        elif m.equivalent:
            equivalent_killed.append(m)

    scored = len(mutants) - len(equivalent_survivors)
    score = 100.0 * counts["killed"] / scored if scored else 100.0
    print()
    print(
        f"{counts['killed']} killed, {counts['survived']} survived, {counts['error']} errors "
        f"of {len(mutants)} mutants in {time.perf_counter() - started:.0f} s"
    )
    print(
        f"kill rate {score:.1f}% ({counts['killed']}/{scored}; "
        f"{len(equivalent_survivors)} equivalent left out)"
    )
    if survivors:
        print("\nsurvivors:")
        for m in survivors:
            print(f"  [{m.source}] {m.label}\n      {m.find!r} -> {m.replace!r}")
    if equivalent_survivors:
        print("\nequivalent (survive by design):")
        for m in equivalent_survivors:
            print(f"  [{m.source}] {m.label}: {m.equivalent}")
    if equivalent_killed:
        print("\nmarked equivalent but killed (drop the mark):")
        for m in equivalent_killed:
            print(f"  [{m.source}] {m.label}")
    return 0 if score >= args.min_score and not counts["error"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
