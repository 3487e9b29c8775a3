"""`runtime serve` security: loopback by default, a token elsewhere, the subject from the server."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("starlette", reason="the serve extra (starlette, uvicorn) is not installed")

import httpx
from serve_support import TOKEN, build, serving

from runtime.serve import auth as _auth
from runtime.serve.errors import ServeError

OTHER = "tok-other-0b1c2d3e4f5a6b7c"


def test_a_non_loopback_bind_without_a_token_does_not_start(tmp_path):
    for host in ("0.0.0.0", "192.168.1.5", "::"):
        with pytest.raises(ServeError) as err:
            _auth.configure(host, None, None, environ={})
        assert err.value.code == "SERVE_TOKEN_MISSING"
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert not _auth.configure(host, None, None, environ={}).required
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ServeError) as err:
        _auth.configure("0.0.0.0", str(empty), None, environ={})
    assert err.value.code == "SERVE_TOKEN_MISSING"
    bad = tmp_path / "bad"
    bad.write_text(f"alice {TOKEN} extra\n")
    with pytest.raises(ServeError) as err:
        _auth.configure("0.0.0.0", str(bad), None, environ={})
    assert "line 1" in err.value.message and TOKEN not in err.value.message


def test_tokens_from_a_file_and_the_environment(tmp_path):
    one = tmp_path / "one"
    one.write_text(TOKEN + "\n")
    assert _auth.read_tokens(str(one), {}) == {"default": TOKEN}
    named = tmp_path / "named"
    named.write_text(f"# callers\nalice {TOKEN}\nci {OTHER}\n")
    assert _auth.read_tokens(str(named), {}) == {"alice": TOKEN, "ci": OTHER}
    assert _auth.read_tokens(None, {"RUNTIME_SERVE_TOKEN": TOKEN}) == {"default": TOKEN}
    checked = _auth.configure("0.0.0.0", str(named), None, environ={})
    assert checked.caller(f"Bearer {TOKEN}") == "alice"
    assert checked.caller(f"Bearer {OTHER}") == "ci"
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}"):
        assert checked.caller(header) is None
    assert TOKEN not in repr(checked)


def test_subjects_file_maps_token_names(tmp_path):
    import json

    named = tmp_path / "named"
    named.write_text(f"alice {TOKEN}\n")
    subjects = tmp_path / "subjects.json"
    subjects.write_text(json.dumps({"mallory": {"id": "m"}}))
    with pytest.raises(ServeError) as err:
        _auth.configure("0.0.0.0", str(named), str(subjects), environ={})
    assert err.value.code == "SERVE_SUBJECTS_INVALID" and "mallory" in err.value.message
    subjects.write_text(json.dumps({"alice": {"id": 5}}))
    with pytest.raises(ServeError) as err:
        _auth.configure("0.0.0.0", str(named), str(subjects), environ={})
    assert err.value.code == "SERVE_SUBJECTS_INVALID"


def test_auth_refused_and_accepted_on_a_non_loopback_bind(tmp_path, caplog):
    import json

    named = tmp_path / "tokens"
    named.write_text(f"alice {TOKEN}\nci {OTHER}\n")
    subjects = tmp_path / "subjects.json"
    subjects.write_text(json.dumps({"alice": {"id": "alice", "roles": ["dev"]}}))
    checked = _auth.configure("0.0.0.0", str(named), str(subjects), environ={})
    caplog.set_level(logging.DEBUG)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    app = build(tmp_path, auth=checked)
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    with serving(app, host="0.0.0.0") as url:  # reached through 127.0.0.1
        keep = Keep()
        for name in ("uvicorn.access", "uvicorn.error"):  # they do not propagate to caplog
            logging.getLogger(name).addHandler(keep)
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}):
            for method, path in (("POST", "/v1/chat/completions"), ("GET", "/runs"), ("GET", "/")):
                got = httpx.request(method, url + path, json=body, headers=headers)
                assert got.status_code == 401, (path, headers)
                assert got.json()["error"]["code"] == "SERVE_UNAUTHORIZED"
                assert got.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{url}/healthz").status_code == 200  # tells nothing of runs
        good = {"Authorization": f"Bearer {TOKEN}"}
        got = httpx.post(f"{url}/v1/chat/completions", json=body, headers=good)
        assert got.status_code == 200
        alice_run = got.headers["x-run-id"]
        got = httpx.post(
            f"{url}/runs?wait=true",
            json={"pipeline": "echo", "inputs": {"question": "q"}},
            headers={"Authorization": f"Bearer {OTHER}"},
        )
        assert got.status_code == 200
        ci_run = got.json()["run_id"]
        # the subject comes from the server's mapping of the caller, never from the body
        refused = httpx.post(
            f"{url}/runs?wait=true",
            json={"pipeline": "echo", "inputs": {"question": "q", "subject": {"id": "root"}}},
            headers=good,
        )
        assert refused.json()["error"]["code"] == "SERVE_SUBJECT_IN_BODY"
        assert httpx.get(f"{url}/runs", headers=good).status_code == 200
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).removeHandler(keep)
    store = app.state.server.service.store
    assert store.subject(alice_run)["id"] == "alice"
    assert store.subject(alice_run)["roles"] == ["dev"]
    assert store.subject(ci_run)["id"] is None  # ci has no mapping: anonymous
    # no secret in logs, traces or the store
    logged = "\n".join(r.getMessage() for r in [*records, *caplog.records])
    assert "POST /v1/chat/completions" in logged  # the access log was captured
    assert TOKEN not in logged and OTHER not in logged
    for run_id in (alice_run, ci_run):
        assert TOKEN not in repr(store.events(run_id)) and OTHER not in repr(store.events(run_id))
    raw = (tmp_path / "runs.db").read_bytes()
    assert TOKEN.encode() not in raw and OTHER.encode() not in raw


def test_loopback_needs_no_token(tmp_path):
    with serving(build(tmp_path)) as url:
        assert httpx.get(f"{url}/runs").status_code == 200
