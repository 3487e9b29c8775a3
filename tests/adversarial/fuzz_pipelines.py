"""Mutated real pipelines for the validator: type swaps, deletions, duplications.

Each mutant starts from a real pipeline file of the repository (the shipped
pipeline, the validation fixtures, the legacy pipelines) and applies one to three
seeded mutations: a value swapped for one of another type, a key or item deleted,
a key, item or line duplicated, a key renamed. `runtime validate` must answer
every mutant with positioned, coded diagnostics and never a traceback.

    python tests/adversarial/fuzz_pipelines.py --count 10000 [--seed 0]

prints how many mutants were validated, how many raised, and the first failures;
exit status 1 when any mutant raised or produced an unpositioned diagnostic.
tests/adversarial/test_fuzz_validate.py runs a few thousand of the same mutants.
"""

from __future__ import annotations

import argparse
import copy
import random
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# Real pipelines, with the folders their `extends` and prompts point into.
SOURCES = [
    ROOT / "pipelines",
    ROOT / "tests" / "data" / "valid",
    ROOT / "tests" / "data" / "invalid",
    ROOT / "tests" / "data" / "legacy" / "pipelines",
]
FOREIGN: list[Any] = [
    [],
    ["x", "y"],
    {},
    {"a": 1},
    {"set": []},
    1,
    0,
    -1,
    10**30,
    1.5,
    float("nan"),
    float("inf"),
    True,
    False,
    None,
    "",
    " ",
    "x",
    "on",
    "$.a[0]",
    "s0",
    "{{x}}",
    "a" * 300,
    [[[[]]]],
    [{"id": 1}],
    {"on": {"yes": None}},
]
KEYS = [
    "id",
    "action",
    "next",
    "end",
    "steps",
    "settings",
    "rules",
    "set",
    "from",
    "value",
    "routes",
    "on_allow",
    "on_deny",
    "on_ok",
    "catch",
    "retry",
    "inputs",
    "outputs",
    "extends",
    "name",
    "entry_step_id",
    "models",
    "max_steps",
    "prompt_key",
    "YAMLpipeline",
    "YAMLpipelines",
    "on",
    "yes",
    "<<",
]


@dataclass
class Mutant:
    """One mutated pipeline: where it came from, what was done, its text."""

    source: Path
    ops: list[str]
    text: str


def corpus() -> list[Path]:
    """The real pipeline files mutants start from."""
    files: list[Path] = []
    for folder in SOURCES:
        files.extend(sorted(folder.rglob("*.yaml")) + sorted(folder.rglob("*.yml")))
    return files


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path inside a value (the root included)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*path, i))


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for seg in path:
        value = value[seg]
    return value


def _mutate_data(rng: random.Random, data: Any) -> tuple[Any, str]:
    """One structural mutation of parsed data."""
    paths = [p for p in _paths(data) if p]
    if not paths:
        return rng.choice(FOREIGN), "root swapped"
    path = rng.choice(paths)
    parent = _get(data, path[:-1])
    last = path[-1]
    op = rng.randrange(6)
    if op <= 1:  # type swap (the most common finding in the wild)
        parent[last] = copy.deepcopy(rng.choice(FOREIGN))
        return data, f"swap {path}"
    if op == 2:  # deletion
        del parent[last]
        return data, f"delete {path}"
    if op == 3:  # duplication of a value into a list or onto a sibling key
        if isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        else:
            other = rng.choice(list(parent))
            parent[other] = copy.deepcopy(parent[last])
        return data, f"duplicate {path}"
    if op == 4 and isinstance(parent, dict):  # rename a key
        new = rng.choice(KEYS)
        parent[new] = parent.pop(last)
        return data, f"rename {path} -> {new}"
    # wrap or unwrap: a value one level too deep or too shallow
    item = parent[last]
    if isinstance(item, list | dict) and item:
        inner = item[0] if isinstance(item, list) else next(iter(item.values()))
        parent[last] = inner
        return data, f"unwrap {path}"
    parent[last] = [item]
    return data, f"wrap {path}"


def _mutate_text(rng: random.Random, text: str) -> tuple[str, str]:
    """One textual mutation: a line duplicated (duplicate keys, items) or deleted."""
    lines = text.splitlines()
    if not lines:
        return text, "empty"
    i = rng.randrange(len(lines))
    if rng.random() < 0.7:
        lines.insert(i, lines[i])
        return "\n".join(lines) + "\n", f"line {i + 1} duplicated"
    del lines[i]
    return "\n".join(lines) + "\n", f"line {i + 1} deleted"


def mutants(count: int, seed: int = 0) -> Iterator[Mutant]:
    """`count` mutants, the same ones for the same seed."""
    rng = random.Random(seed)
    files = corpus()
    texts = {f: f.read_text(encoding="utf-8") for f in files}
    parsed: dict[Path, list[Any]] = {}
    for f, text in texts.items():
        try:
            parsed[f] = list(yaml.safe_load_all(text))
        except yaml.YAMLError:
            parsed[f] = []
    for _ in range(count):
        source = rng.choice(files)
        ops: list[str] = []
        docs = copy.deepcopy(parsed[source])
        if docs and rng.random() < 0.8:
            for _ in range(rng.randint(1, 3)):
                d = rng.randrange(len(docs))
                docs[d], op = _mutate_data(rng, docs[d])
                ops.append(op)
            text = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
        else:
            text = texts[source]
        if not ops or rng.random() < 0.3:
            text, op = _mutate_text(rng, text)
            ops.append(op)
        yield Mutant(source, ops, text)


class Workspace:
    """A private copy of the corpus folders; a mutant is written beside its source."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.map: dict[Path, Path] = {}
        for i, folder in enumerate(SOURCES):
            dest = tmp / f"src{i}"
            shutil.copytree(folder, dest)
            for f in folder.rglob("*"):
                self.map[f] = dest / f.relative_to(folder)

    def write(self, mutant: Mutant) -> Path:
        """Write the mutant next to the copy of its source (so relative extends resolve)."""
        path = self.map[mutant.source].with_name("_mutant.yaml")
        path.write_text(mutant.text, encoding="utf-8")
        return path


def check(path: Path, allowed_files: set[str]) -> list[str]:
    """Validate one file; the problems with the answer (empty when it is well-formed)."""
    from runtime import codes
    from runtime.format.validation import validate_paths

    report = validate_paths([str(path)])
    problems = []
    for d in report.diagnostics:
        if d.code not in codes.CODES or d.code == "VALIDATION_CRASHED":
            problems.append(f"code {d.code}: {d.message}")
        if d.line < 1 or d.column < 1 or str(Path(d.file).resolve()) not in allowed_files:
            problems.append(f"unpositioned: {d.file}:{d.line}:{d.column} {d.code}")
    return problems


def run(
    count: int, seed: int, tmp: Path, ops: set[str] | None = None, start: int = 0
) -> tuple[int, list[str]]:
    """Validate mutants start..count-1 of a seed; the number validated and the failures.

    ops, when given, collects the kinds of mutation applied (swap, delete, ...). The
    mutants before `start` are generated (so the sequence is the same) but not validated:
    the fast and the slow test split one sequence between them.
    """
    ws = Workspace(tmp)
    allowed = {str(p.resolve()) for p in tmp.rglob("*")}
    failures: list[str] = []
    done = 0
    for i, mutant in enumerate(mutants(count, seed)):
        if i < start:
            continue
        if ops is not None:
            ops.update(op.split()[0] for op in mutant.ops)
        path = ws.write(mutant)
        allowed.add(str(path.resolve()))
        try:
            problems = check(path, allowed)
        except Exception:  # the point is to catch every crash
            problems = [traceback.format_exc(limit=-3)]
        done += 1
        if problems:
            failures.append(f"{mutant.source.name} {mutant.ops}: {problems[0]}")
    return done, failures


def main() -> None:
    """Validate --count mutants and report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        done, failures = run(args.count, args.seed, Path(tmp))
        seconds = time.perf_counter() - t0
    print(f"{done} mutants validated in {seconds:.1f} s (seed {args.seed}); {len(failures)} failed")
    for f in failures[:20]:
        print(" -", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
