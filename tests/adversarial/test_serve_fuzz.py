"""Hostile request bodies against `runtime serve`: always coded JSON, never a 500 or a traceback.

Seeded mutations of valid chat-completion and run bodies (fields dropped, values of every JSON
type, deep nesting, lone surrogates, invalid UTF-8, huge numbers, NaN, byte damage) go to a
real server on 127.0.0.1. A small chunk runs in the fast subset, more under `slow`.
"""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")

import httpx
from serve_support import build, serving

from runtime import codes
from runtime.serve.limits import Limits

CHAT = {
    "model": "echo",
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "question"},
    ],
    "stream": False,
}
RUN = {"pipeline": "echo", "inputs": {"question": "q", "history": []}}
VALUES = [
    None,
    True,
    0,
    -1,
    10**40,
    1.5e308,
    "",
    "x" * 3000,
    "\ud800",
    "<script>",
    [],
    [None],
    {},
    {"role": "user"},
    {"type": "text", "text": 5},
    [{"type": "image_url"}],
    "slow",
    "ech",
]


def _mutate(rng: random.Random, value, depth: int = 0):
    """One random change somewhere in a JSON value."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(list(value))
        out = dict(value)
        choice = rng.random()
        if choice < 0.2:
            del out[key]
        elif choice < 0.3:
            out[rng.choice(["subject", "zz", "", "\ud800"])] = rng.choice(VALUES)
        else:
            out[key] = _mutate(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        out = list(value)
        i = rng.randrange(len(out))
        if rng.random() < 0.2:
            del out[i]
        else:
            out[i] = _mutate(rng, out[i], depth + 1)
        return out
    return rng.choice(VALUES)


def _bodies(seed: int, n: int) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    for _ in range(n):
        base = rng.choice([CHAT, RUN])
        value = base
        for _ in range(rng.randint(1, 3)):
            value = _mutate(rng, value)
        kind = rng.random()
        if kind < 0.7:
            data = json.dumps(value).encode()
        elif kind < 0.8:  # byte damage
            data = bytearray(json.dumps(value).encode())
            for _ in range(rng.randint(1, 4)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            data = bytes(data)
        elif kind < 0.9:  # deep nesting
            depth = rng.choice([50, 5000, 100000])
            data = b'{"model": "echo", "messages": ' + b"[" * depth + b"]" * depth + b"}"
        else:  # not JSON at all, or not an object
            data = rng.choice([b"", b"null", b"[1,2]", b'"x"', b"\xff\xfe", b"NaN", b"{"])
        out.append(data)
    return out


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with serving(build(tmp_path_factory.mktemp("fuzz"), limits=Limits(max_runs=64))) as url:
        yield url


def _check(url: str, bodies: list[bytes]) -> None:
    with httpx.Client(timeout=60) as client:
        for i, data in enumerate(bodies):
            path = ["/v1/chat/completions", "/runs?wait=true", "/runs"][i % 3]
            got = client.post(
                url + path, content=data, headers={"Content-Type": "application/json"}
            )
            assert "Traceback" not in got.text, (data[:200], got.text[:500])
            assert got.status_code < 500, (data[:200], got.status_code, got.text[:500])
            answer = got.json()
            if got.status_code >= 400:
                assert set(answer) >= {"error"}, answer
                assert answer["error"]["code"] in codes.CODES, answer
                assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]


def test_fuzzed_bodies_get_coded_json(url):
    _check(url, _bodies(33, 150))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_fuzzed_bodies_get_coded_json_slow(url, seed):
    _check(url, _bodies(1000 + seed, 500))


def test_hostile_query_and_path_values(url):
    with httpx.Client(timeout=30) as client:
        for path in (
            "/runs?status=%00",
            "/runs?limit=-1",
            "/runs?limit=99999999999999999999",
            "/runs?pipeline=%ff",
            "/runs/%2e%2e%2fetc/trace?type=%ff",
            "/runs/" + "x" * 5000,
            "/v1/models?x=\u202e",
            "/runs/%00/context",
        ):
            got = client.get(url + path)
            assert got.status_code < 500, (path, got.text[:300])
            if got.status_code >= 400:
                assert got.json()["error"]["code"] in codes.CODES
        got = client.post(url + "/runs?wait=maybe", json=RUN)
        assert (got.status_code, got.json()["error"]["code"]) == (400, "SERVE_BAD_REQUEST")
        got = client.put(url + "/runs")
        assert got.status_code == 405 and got.json()["error"]["code"] == "SERVE_NOT_FOUND"
