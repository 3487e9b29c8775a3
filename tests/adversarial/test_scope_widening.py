"""No input widens the retrieval scope: not empty, blank, wildcard, case, look-alike or SQL/FTS.

The rule (docs/retrieval.md, "Scope"): a repository, snapshot or label list pinned in
`settings` can only be narrowed by the run's inputs: a repository or snapshot input must
repeat the pinned value, a label list must be a subset of the pinned one
(SCOPE_WIDENED). An empty or blank value is SCOPE_INVALID wherever it comes from, since
`""` would otherwise mean "every repository". Any other value is a name matched exactly,
never a pattern. The index holds the sample twice (`eshop` and `other`, snapshot
`main`), with a confidential and a secret procedure in each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import runtime
from runtime.cli import cli

SAMPLE_ROOT = Path(__file__).resolve().parents[2] / "pipelines" / "sample" / "eshop"
LABEL_RULES = [
    ("Procedures/usp_CapturePayment.sql", ["confidential"]),
    ("Procedures/usp_CancelOrder.sql", ["secret"]),
]
PINNED = {"repository": "eshop", "snapshot": "main", "allowed_labels": ["confidential"]}
QUERY = "usp_CapturePayment usp_CancelOrder usp_PlaceOrder"
CAPTURE = "eshop::main::procedure::dbo.usp_CapturePayment"
CANCEL = "eshop::main::procedure::dbo.usp_CancelOrder"
PLACE = "eshop::main::procedure::dbo.usp_PlaceOrder"
LABELLED = {CAPTURE, CANCEL, CAPTURE.replace("eshop", "other"), CANCEL.replace("eshop", "other")}

BLANK = ["", " ", "\t", "\n", " \u3000 ", " eshop", "eshop ", "main\n"]
# Names that are not the pinned one, however close they look or whatever syntax they hold.
NOT_PINNED = [
    "*",
    "%",
    "_",
    "eshop*",
    "esh%",
    "ESHOP",
    "Eshop",
    "\u0435shop",  # Cyrillic small ie
    "eshop\u200b",  # zero-width space
    "\uff45\uff53\uff48\uff4f\uff50",  # fullwidth eshop
    'eshop" OR "1',
    "eshop' OR '1'='1",
    "eshop OR other",
    "zzr6573686f70 OR zzr6f74686572",  # the FTS meta tokens of eshop and other, as words
    "other",
]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    path = tmp_path_factory.mktemp("widen") / "index.db"
    store = open_store(str(path), create=True)
    for repository in ("eshop", "other"):
        index_paths(
            store,
            [str(SAMPLE_ROOT / "Database")],
            repository=repository,
            snapshot="main",
            label_rules=LABEL_RULES,
            jobs=1,
        )
    return store


STEPS = {
    "search": {"id": "s", "action": "search_nodes", "query_from": "q", "top_k": 40},
    "expand": {"id": "s", "action": "expand_dependency_tree", "max_depth": 1},
    "fetch": {"id": "s", "action": "fetch_node_texts", "budget_tokens": 4000},
}


def run(store: Any, inputs: dict[str, Any], settings: dict[str, Any], step: str = "search") -> Any:
    settings = {"entry_step_id": "s", **settings}
    steps = [
        {**STEPS[step], "next": "end"},
        {"id": "end", "action": "finalize", "source": "retrieval_query"},
    ]
    pipeline = runtime.Pipeline.from_dict({"settings": settings, "steps": steps})
    services = runtime.Services(settings=settings, node_store=store)
    state = {"q": QUERY, "retrieval_query": "x", "retrieval_seed_nodes": [PLACE, CAPTURE]}
    return runtime.Runner(pipeline, services=services).run({**state, **inputs}, run_id="t")


def refused(result: Any, code: str) -> None:
    """The step failed with code before reading anything."""
    assert result.status == "failed"
    assert (result.error.code, result.error.step_id) == (code, "s")
    assert not [e for e in result.events if e["type"] in ("SEARCH", "EXPAND", "FETCH")]


def seen(result: Any) -> list[str]:
    assert result.error is None, result.error
    return list(result.state["retrieval_seed_nodes"])


# --- a pinned scope ---------------------------------------------------------------------


CLEARED = {"subject": {"clearance": ["confidential", "secret"]}}


def test_the_pinned_scope_itself_is_searched(index):
    ids = seen(run(index, CLEARED, PINNED))
    assert CAPTURE in ids and PLACE in ids and CANCEL not in ids
    assert {i.split("::")[0] for i in ids} == {"eshop"}
    same = seen(run(index, {"repository": "eshop", "snapshot": "main", **CLEARED}, PINNED))
    assert same == ids
    # Without a subject the run is anonymous: the pin is a ceiling, not a grant.
    anonymous = seen(run(index, {}, PINNED))
    assert CAPTURE not in anonymous and PLACE in anonymous


@pytest.mark.parametrize("name", ["repository", "snapshot"])
@pytest.mark.parametrize("value", BLANK)
@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_blank_scope_input_is_refused_in_every_retrieval_action(index, name, value, step):
    refused(run(index, {name: value}, PINNED, step), "SCOPE_INVALID")
    refused(run(index, {name: value}, {}, step), "SCOPE_INVALID")  # unpinned too: "" is not "all"


@pytest.mark.parametrize("name", ["repository", "snapshot"])
@pytest.mark.parametrize("value", NOT_PINNED)
def test_an_input_other_than_the_pinned_name_is_refused(index, name, value):
    result = run(index, {name: value}, PINNED)
    refused(result, "SCOPE_WIDENED")
    assert "inputs may only narrow the scope" in result.error.message
    assert "'eshop'" not in result.error.message and "'main'" not in result.error.message


@pytest.mark.parametrize(
    "labels",
    [
        ["secret"],
        ["confidential", "secret"],
        ["*"],
        ["%"],
        ["CONFIDENTIAL"],
        ["confidentia\u0406"],  # Cyrillic capital I for the l
        ['confidential" OR "1'],
        ["confidential OR secret"],
    ],
)
def test_input_labels_beyond_the_pinned_ones_are_refused(index, labels):
    result = run(index, {"allowed_labels": labels}, PINNED)
    refused(result, "SCOPE_WIDENED")
    assert "inputs may only narrow the labels" in result.error.message


@pytest.mark.parametrize("labels", [[""], [" "], ["confidential", ""], [" confidential"]])
def test_blank_labels_are_refused(index, labels):
    refused(run(index, {"allowed_labels": labels}, PINNED), "SCOPE_INVALID")


@pytest.mark.parametrize(
    "labels,visible",
    [(["confidential"], {CAPTURE}), ([], set()), (None, set())],
)
def test_input_labels_may_narrow_the_pinned_ones(index, labels, visible):
    ids = seen(run(index, {"allowed_labels": labels}, PINNED))
    assert set(ids) & LABELLED == visible and PLACE in ids


@pytest.mark.parametrize(
    "settings",
    [{"repository": ""}, {"snapshot": " "}, {"allowed_labels": [""]}, {"repository": "eshop "}],
)
def test_a_blank_pinned_value_is_refused_at_run_time(index, settings):
    refused(run(index, {}, settings), "SCOPE_INVALID")


@pytest.mark.parametrize(
    "line", ['repository: ""', "snapshot: ' '", "allowed_labels: ['']", "repository: ' eshop'"]
)
def test_a_blank_pinned_value_is_refused_at_validation(tmp_path, line):
    path = tmp_path / "p.yaml"
    path.write_text(
        f"settings:\n  entry_step_id: s\n  {line}\n"
        "steps:\n  - {id: s, action: finalize, source: q}\n"
    )
    report = runtime.validate(str(path))
    assert [(d.code, d.line) for d in report.diagnostics if d.severity == "error"] == [
        ("SCHEMA_PATTERN", 3)
    ]


# --- no pinned scope: the input decides, matched exactly --------------------------------


@pytest.mark.parametrize("value", NOT_PINNED[:-1])
def test_an_unpinned_name_is_matched_exactly_never_as_a_pattern(index, value):
    for name in ("repository", "snapshot"):
        result = run(index, {name: value, "allowed_labels": ["confidential", "secret"]}, {})
        assert seen(result) == [], (name, value)
        [event] = [e for e in result.events if e["type"] == "SEARCH"]
        assert event["scope"][name] == value


@pytest.mark.parametrize(
    "labels", [["*"], ["%"], ["SECRET"], ['secret" OR "1'], ["secret OR confidential"]]
)
def test_unpinned_look_alike_labels_show_no_labelled_node(index, labels):
    ids = seen(run(index, {"repository": "eshop", "allowed_labels": labels}, {}))
    assert PLACE in ids and not set(ids) & LABELLED


# --- runtime search ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--repository", ""],
        ["--repository", " "],
        ["--repository", " eshop"],
        ["--snapshot", ""],
        ["--label", ""],
        ["--repository", "eshop", "--label", "\t"],
    ],
)
def test_the_search_command_refuses_blank_scope_values(index, runner, args):
    done = runner.invoke(cli, ["search", QUERY, "--index", str(index.path), *args])
    assert done.exit_code == 1
    assert done.stderr.startswith("error: SCOPE_INVALID: scope ")
    assert done.stdout == ""


@pytest.mark.parametrize("value", NOT_PINNED[:-1])
def test_the_search_command_matches_scope_values_exactly(index, runner, value):
    base = ["search", QUERY, "--index", str(index.path), "--json", "--top-k", "40"]
    everything = runner.invoke(cli, [*base, "--label", "confidential", "--label", "secret"])
    assert len(everything.stdout) > 100  # the index answers this query at all
    for option in ("--repository", "--snapshot"):
        # Not a name the index holds: refused, naming it, and nothing is searched (a value
        # shaped as an FTS or SQL expression never widens the scope).
        done = runner.invoke(cli, [*base, option, value])
        assert (done.exit_code, done.stdout) == (2, ""), (option, value)
        assert f"{option} {value!r}: the index holds no such" in done.stderr
    done = runner.invoke(cli, [*base, "--repository", "eshop", "--label", value])
    ids = {h["id"] for h in json.loads(done.stdout)["hits"]}
    assert PLACE in ids and not ids & LABELLED
