"""The yes/no schema check: runtime/format/fastcheck.py against jsonschema-rs (issue 23 item 9).

Run: python benchmarks/schema_check.py [--mutants 4000] [--repeat 9]
(jsonschema-rs is not a dependency: `pip install jsonschema-rs` in the venv first.)

Validation checks each step against its action's schema and each document against
the top-level schema with a fast yes/no check, and asks jsonschema (Python) for the
errors only when the answer is no (runtime/format/validation.py: `_Schema`). Two
questions decide whether jsonschema-rs could replace a part of that:

1. Does it give the same answers? Over the shipped pipelines, the fuzz corpus
   (tests/adversarial/fuzz_pipelines.py, the mutants tests/runtime/test_fastcheck.py
   uses) and test_fastcheck.py's table of edge values, it prints how often
   jsonschema-rs's yes/no differs from jsonschema's (which the diagnostics come from)
   and from fastcheck's, and, for the values that are invalid, how often its errors
   differ from jsonschema's (as a set of (instance path, keyword) pairs: the path and
   the code a diagnostic is made of).
2. Is it faster? The checks validation makes for each shipped pipeline (top level plus
   every step), timed with each checker, schemas compiled; compiling every schema of
   the registry; importing the module in a fresh process; and `validate_paths` on the
   shipped pipelines with each checker in `_Schema.valid`.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "adversarial"))
SHIPPED = [ROOT / "pipelines" / n for n in ("code_qa.yaml", "review_loop.yaml", "long_inputs.yaml")]

Pair = tuple[str, Any]  # (schema name, instance)


def schemas() -> dict[str, Any]:
    """The schemas validation checks against: the top level and one per registered action."""
    from runtime.contract.registry import default_registry
    from runtime.format.schema import INPUT_SCHEMA, PIPELINE_FIELDS, SETTINGS_SCHEMA, action_def

    registry = default_registry()
    top = {
        "type": "object",
        "properties": {**PIPELINE_FIELDS, "steps": {"type": "array", "items": {"type": "object"}}},
        "additionalProperties": False,
        "$defs": {"settings": SETTINGS_SCHEMA, "input": INPUT_SCHEMA},
    }
    actions = {n: registry.get(n) for n in registry.names()}
    return {"<top>": top, **{n: action_def(cls) for n, cls in actions.items() if cls is not None}}


def pairs_of(doc: Any, known: dict[str, Any]) -> list[Pair]:
    """What validation checks in one document: the document, then each step of a known action."""
    out: list[Pair] = [("<top>", doc)]
    steps = doc.get("steps") if isinstance(doc, dict) else None
    for step in steps if isinstance(steps, list) else []:
        name = step.get("action") if isinstance(step, dict) else None
        if isinstance(name, str) and name in known:
            out.append((name, step))
    return out


def documents(path: str, text: str | None = None) -> list[Any]:
    """The pipelines of a file as validation checks them: runtime's loader (located values,
    YAML 1.1 boolean keys restored to their text), pack members one by one."""
    from runtime.format.loader import pipelines_in, read_yaml

    docs, _problems = pipelines_in(read_yaml(path, text))
    return [d.data for d in docs]


def shipped_pairs(known: dict[str, Any]) -> dict[str, list[Pair]]:
    return {
        p.name: [pair for d in documents(str(p)) for pair in pairs_of(d, known)] for p in SHIPPED
    }


def fuzz_pairs(count: int, known: dict[str, Any]) -> list[Pair]:
    import fuzz_pipelines

    out: list[Pair] = []
    for seed in (7, 8, 9, 10):  # the seeds of test_fastcheck.py
        for mutant in fuzz_pipelines.mutants(count // 4, seed=seed):
            for doc in documents(str(mutant.source), mutant.text):
                out += pairs_of(doc, known)
    return out


def edge_cases() -> list[tuple[Any, Any]]:
    """test_fastcheck.py's table: (schema, value) for each value of each row."""
    spec = importlib.util.spec_from_file_location(
        "test_fastcheck", ROOT / "tests" / "runtime" / "test_fastcheck.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    [mark] = [
        m
        for m in module.test_the_fast_check_agrees_with_jsonschema.pytestmark
        if m.name == "parametrize"
    ]
    return [(schema, value) for schema, values in mark.args[1] for value in values]


def pattern_probes() -> list[tuple[Any, Any]]:
    """Each `pattern` the schemas use, against strings where regex dialects part ways.

    Python's `re` (jsonschema and fastcheck) lets `$` match before a final newline and
    counts U+001C..U+001F and U+0085 as `\\s`; ECMA-262 regexes, which jsonschema-rs
    follows, do neither, and it counts U+2028 as `\\s` and excludes it from `.`.
    """
    import json

    text = json.dumps(schemas())
    found = sorted(set(re.findall(r'"pattern": ("(?:[^"\\]|\\.)*")', text)))
    probes = ["main", "main\n", "\x1c", "\x1f", "\x85", "a\u2028b", "ALL\n", "x y"]
    return [({"type": "string", "pattern": json.loads(p)}, v) for p in found for v in probes]


def _rs_errors(validator: Any, value: Any) -> set[tuple[tuple[Any, ...], str]]:
    return {
        (tuple(e.instance_path), str(e.schema_path[-1]) if e.schema_path else "false")
        for e in validator.iter_errors(value)
    }


def _py_errors(validator: Any, value: Any) -> set[tuple[tuple[Any, ...], str]]:
    # A `false` schema's error has no keyword in jsonschema; jsonschema-rs calls it "false".
    return {
        (tuple(e.absolute_path), "false" if e.validator is None else str(e.validator))
        for e in validator.iter_errors(value)
    }


def agreement(
    label: str, cases: list[tuple[Any, Any]], compiled: dict[int, tuple[Any, Any, Any]]
) -> dict[str, Any]:
    """Yes/no and error sets of the three checkers over (schema, value) cases."""
    import jsonschema
    import jsonschema_rs

    from runtime.format.fastcheck import compile_check

    verdicts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for schema, value in cases:
        key = id(schema)
        if key not in compiled:
            compiled[key] = (
                compile_check(schema),
                jsonschema.Draft202012Validator(schema),
                jsonschema_rs.Draft202012Validator(schema),
            )
        fast, py, rs = compiled[key]
        try:
            rs_ok = rs.is_valid(value)
        except Exception as exc:  # a value jsonschema-rs cannot take (a huge int, NaN)
            verdicts["jsonschema-rs raised"] += 1
            examples.setdefault("jsonschema-rs raised", []).append(f"{value!r:.60} {exc!r:.80}")
            continue
        py_ok, fast_ok = py.is_valid(value), (fast(value) if fast is not None else None)
        verdicts["values"] += 1
        verdicts["invalid (jsonschema)"] += not py_ok
        if rs_ok != py_ok:
            # valid for jsonschema-rs only: as the gate, it would let the value through unreported
            which = (
                "accepts what jsonschema refuses" if rs_ok else "refuses what jsonschema accepts"
            )
            verdicts[f"yes/no: jsonschema-rs {which}"] += 1
            examples.setdefault(f"yes/no, {which}", []).append(
                f"{value!r:.40} against {schema.get('pattern', schema) if isinstance(schema, dict) else schema!r:.40}:"
                f" jsonschema {py_ok}, jsonschema-rs {rs_ok}"
            )
        if fast_ok is not None and fast_ok != py_ok:
            verdicts["yes/no: fastcheck != jsonschema"] += 1
        try:
            rs_errors = _rs_errors(rs, value) if not py_ok and rs_ok == py_ok else set()
        except Exception as exc:
            verdicts["jsonschema-rs raised listing errors"] += 1
            examples.setdefault("raised listing errors", []).append(f"{value!r:.60} {exc!r:.80}")
            continue
        if not py_ok and rs_ok == py_ok and rs_errors != _py_errors(py, value):
            verdicts["errors: paths/keywords differ"] += 1
            examples.setdefault("errors", []).append(
                f"{value!r:.50} py {sorted(_py_errors(py, value))!s:.90}"
                f" rs {sorted(_rs_errors(rs, value))!s:.90}"
            )
    return {"label": label, "verdicts": dict(verdicts), "examples": examples}


def timed(fn: Callable[[], Any], repeat: int, number: int) -> float:
    """Median seconds per call of fn over `repeat` runs of `number` calls."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t0) / number)
    return statistics.median(runs)


def speed(repeat: int) -> None:
    import jsonschema_rs

    from runtime.format.fastcheck import compile_check
    from runtime.format.validation import _Schema, validate_paths

    all_schemas = schemas()
    fast = {n: compile_check(s) for n, s in all_schemas.items()}
    rs = {n: jsonschema_rs.Draft202012Validator(s) for n, s in all_schemas.items()}
    print("\nyes/no checks of the shipped pipelines (schemas compiled), median per pipeline:")
    print(
        f"  {'pipeline':<18} {'checks':>6} {'fastcheck':>11} {'jsonschema-rs':>14} {'rs/fast':>8}"
    )
    for name, pairs in shipped_pairs(all_schemas).items():
        f = timed(lambda pairs=pairs: [fast[n](v) for n, v in pairs], repeat, 200)  # type: ignore[misc]
        r = timed(lambda pairs=pairs: [rs[n].is_valid(v) for n, v in pairs], repeat, 200)
        print(f"  {name:<18} {len(pairs):>6} {f * 1e6:>9.1f}µs {r * 1e6:>12.1f}µs {r / f:>8.2f}")

    def compile_fast() -> None:
        for s in all_schemas.values():
            compile_check(s)

    def compile_rs() -> None:
        for s in all_schemas.values():
            jsonschema_rs.Draft202012Validator(s)

    cf, cr = timed(compile_fast, repeat, 5), timed(compile_rs, repeat, 5)
    print(
        f"\ncompiling all {len(all_schemas)} schemas: fastcheck {cf * 1e3:.2f} ms, "
        f"jsonschema-rs {cr * 1e3:.2f} ms"
    )

    imports = {}
    for module in ("runtime.format.fastcheck", "jsonschema_rs", "jsonschema"):
        code = (
            f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
        )
        runs = [
            float(
                subprocess.run(
                    [sys.executable, "-c", code],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=ROOT,
                ).stdout
            )
            for _ in range(repeat)
        ]
        imports[module] = statistics.median(runs)
    print(
        "import in a fresh process: "
        + ", ".join(f"{m} {s * 1e3:.1f} ms" for m, s in imports.items())
    )

    # End to end: validate_paths on the shipped pipelines, _Schema.valid through each checker.
    by_id: dict[int, Any] = {}
    original = _Schema.valid

    def rs_valid(self: Any, instance: Any) -> bool:
        found = by_id.get(id(self))
        if found is None:
            found = by_id[id(self)] = jsonschema_rs.Draft202012Validator(self.schema)
        return bool(found.is_valid(instance))

    files = [str(p) for p in SHIPPED]
    validate_paths(files)  # warm: schemas compiled, prompt files cached by the OS
    e_fast = timed(lambda: validate_paths(files), repeat, 3)
    _Schema.valid = rs_valid  # type: ignore[method-assign]
    try:
        validate_paths(files)
        e_rs = timed(lambda: validate_paths(files), repeat, 3)
    finally:
        _Schema.valid = original  # type: ignore[method-assign]
    print(
        f"validate_paths(three shipped pipelines): fastcheck {e_fast * 1e3:.1f} ms, "
        f"jsonschema-rs {e_rs * 1e3:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=4000, help="fuzz mutants (4 seeds)")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    if importlib.util.find_spec("jsonschema_rs") is None:
        parser.error("jsonschema-rs is not installed: pip install jsonschema-rs")
    from importlib.metadata import version

    print(f"jsonschema-rs {version('jsonschema-rs')}, Python {sys.version.split()[0]}")
    all_schemas = schemas()
    compiled: dict[int, tuple[Any, Any, Any]] = {}

    def cases(pairs: list[Pair]) -> list[tuple[Any, Any]]:
        return [(all_schemas[n], v) for n, v in pairs]

    shipped = [pair for pairs in shipped_pairs(all_schemas).values() for pair in pairs]
    reports = [
        agreement("shipped pipelines", cases(shipped), compiled),
        agreement(
            f"fuzz corpus ({args.mutants} mutants)",
            cases(fuzz_pairs(args.mutants, all_schemas)),
            compiled,
        ),
        agreement("test_fastcheck.py edge values", edge_cases(), compiled),
        agreement("the schemas' patterns against dialect edges", pattern_probes(), compiled),
    ]
    for report in reports:
        print(f"\n{report['label']}:")
        for key, n in report["verdicts"].items():
            print(f"  {key}: {n}")
        for key, found in report["examples"].items():
            print(f"  e.g. ({key}, {len(found)}):")
            for line in found[:4]:
                print(f"    {line}")
    speed(args.repeat)


if __name__ == "__main__":
    main()
