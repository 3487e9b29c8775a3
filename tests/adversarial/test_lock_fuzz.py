"""A damaged or hostile lock file is LOCK_INVALID or LOCK_DRIFT, never a traceback and never
"current" when it no longer says what the pipeline does (issue 32)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from runtime.contract.registry import default_registry
from runtime.format import lock
from runtime.format.validation import load_pipeline

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [None, True, 0, -1, 1.5, "", "x", [], [1], {}, {"a": 1}, [{}], "\x1b[2J"]


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _set(root, path, value):
    node = root
    for seg in path[:-1]:
        node = node[seg]
    node[path[-1]] = value


@pytest.fixture(scope="module")
def locked():
    pipeline = load_pipeline(str(ROOT / "pipelines" / "code_qa.yaml"), locked=None)
    registry = default_registry()
    return pipeline, registry, lock.build(pipeline, registry)


def test_every_value_of_a_lock_swapped_for_another_shape_is_coded(locked, tmp_path):
    pipeline, registry, good = locked
    rng = random.Random(32)
    paths = [p for p in _paths(good) if p]
    target = tmp_path / "code_qa.lock.json"
    for path in rng.sample(paths, min(150, len(paths))):
        damaged = json.loads(json.dumps(good))
        _set(damaged, path, rng.choice(SHAPES))
        target.write_text(json.dumps(damaged))
        found = lock.check(pipeline, registry, target)  # must not raise
        assert all(d.code in ("LOCK_INVALID", "LOCK_DRIFT") for d in found), (path, found)
        if damaged != good:
            assert found, f"a lock changed at {path} was taken as current"


def test_random_bytes_in_a_lock_are_lock_invalid(locked, tmp_path):
    pipeline, registry, good = locked
    text = lock.render(good).encode()
    rng = random.Random(7)
    target = tmp_path / "code_qa.lock.json"
    for _ in range(80):
        raw = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        target.write_bytes(bytes(raw))
        found = lock.check(pipeline, registry, target)
        if bytes(raw) != text:
            assert found, "a damaged lock was taken as current"
        assert all(d.code in ("LOCK_INVALID", "LOCK_DRIFT") for d in found)
