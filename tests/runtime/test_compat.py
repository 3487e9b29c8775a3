"""What the format keeps of the older engine: prompt folders, UI fields, null allowlists,
query parsers, unread settings, the snapshot trio, answer variables, scenario indexes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import runtime
from runtime.contract.action import Action
from runtime.contract.registry import Registry, default_registry
from runtime.engine import Engine
from runtime.engine.services import Services
from runtime.format.pipeline import Pipeline

END = {"id": "end", "action": "finalize", "source": "x"}
# The variable END reads comes in (else a VARIABLE_NEVER_WRITTEN warning at END).
INPUTS = {"x": "any"}


def write(path: Path, data: dict[str, Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))  # JSON is YAML
    return str(path)


def found(report) -> list[tuple[str, str, str]]:
    return [(d.code, d.severity, d.path) for d in report.diagnostics]


def asking(key: str, **settings: Any) -> dict[str, Any]:
    step = {"id": "a", "action": "call_model", "prompt_key": key, "next": "end"}
    return {"settings": {"entry_step_id": "a", **settings}, "inputs": INPUTS, "steps": [step, END]}


# --- the prompt folder -------------------------------------------------------------------


def test_the_prompt_folder_beside_the_file_wins_then_the_working_directory_then_above(
    tmp_path, monkeypatch
):
    project = tmp_path / "project"
    pipeline = write(project / "pipelines" / "p.yaml", asking("qa/answer"))
    (project / "prompts" / "qa").mkdir(parents=True)
    (project / "prompts" / "qa" / "answer.txt").write_text("older layout")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "prompts").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    # (3) a folder above the pipeline file: the older engine's project root.
    assert runtime.load(pipeline).prompts_dir == project / "prompts"
    assert runtime.validate(pipeline).diagnostics == []
    # (2) the working directory comes before the folders above.
    monkeypatch.chdir(elsewhere)
    [missing] = runtime.validate(pipeline).diagnostics
    assert (missing.code, missing.message) == (
        "PROMPT_NOT_FOUND",
        f"prompt 'qa/answer' not found under {elsewhere / 'prompts'}",
    )
    # (1) beside the file comes first of all.
    (project / "pipelines" / "prompts" / "qa").mkdir(parents=True)
    (project / "pipelines" / "prompts" / "qa" / "answer.md").write_text("new layout")
    assert runtime.load(pipeline).prompts_dir == project / "pipelines" / "prompts"


def test_a_relative_prompts_dir_from_the_older_engines_root_and_an_absolute_one(
    tmp_path, monkeypatch
):
    root = tmp_path / "root"
    (root / "tests" / "data" / "prompts" / "e2e").mkdir(parents=True)
    (root / "tests" / "data" / "prompts" / "e2e" / "r.txt").write_text("router")
    data = asking("e2e/r", prompts_dir="tests/data/prompts")
    pipeline = write(root / "tests" / "data" / "pipelines" / "p.yaml", data)
    monkeypatch.chdir(tmp_path)
    assert runtime.validate(pipeline).diagnostics == []  # found above the file
    absolute = asking("e2e/r", prompts_dir=str(root / "tests" / "data" / "prompts"))
    assert runtime.validate(write(tmp_path / "abs.yaml", absolute)).diagnostics == []
    missing = write(tmp_path / "x" / "p.yaml", asking("e2e/r", prompts_dir="nowhere"))
    [diag] = runtime.validate(missing).diagnostics
    assert diag.hint == f"create {tmp_path / 'x' / 'nowhere' / 'e2e/r'}.md"


# --- fields of the older engine ------------------------------------------------------------


def test_ui_fields_are_accepted_on_every_step_and_type_checked(tmp_path):
    ui = {
        "stages_visible": True,
        "callback_caption": "Searching",
        "callback_caption_translated": "Szukanie",
        "custom_banner": {"neutral": "note", "translated": "uwaga"},
    }
    data = {
        "settings": {"entry_step_id": "a"},
        "steps": [
            {
                "id": "a",
                "action": "set_variables",
                "rules": [{"set": "x", "value": 1}],
                **ui,
                "next": "end",
            },
            {**END, "persist_turn": True, **ui},
        ],
    }
    assert runtime.validate(write(tmp_path / "ok.yaml", data)).diagnostics == []
    data["steps"][0]["custom_banner"] = {"neutral": 3, "colour": "red"}
    data["steps"][1]["stages_visible"] = "yes"
    data["steps"][1]["persist_turn"] = "no"
    assert sorted(found(runtime.validate(write(tmp_path / "bad.yaml", data)))) == [
        ("SCHEMA_TYPE", "error", "$.steps[0].custom_banner.neutral"),
        ("SCHEMA_TYPE", "error", "$.steps[1].persist_turn"),
        ("SCHEMA_TYPE", "error", "$.steps[1].stages_visible"),
        ("SCHEMA_UNKNOWN_FIELD", "error", "$.steps[0].custom_banner.colour"),
    ]


def test_query_parser_jsonish_is_honoured_any_other_is_a_warning(tmp_path):
    data = {
        "settings": {"entry_step_id": "s"},
        "steps": [
            {
                "id": "s",
                "action": "search_nodes",
                "query_parser": "JsonishQueryParser",
                "next": "g",
            },
            {
                "id": "g",
                "action": "repeat_query_guard",
                "query_parser": "RegexParser",
                "on_ok": "end",
                "on_repeat": "end",
            },
            END,
        ],
        "inputs": {**INPUTS, "last_model_response": "string"},  # the query both steps read
    }
    report = runtime.validate(write(tmp_path / "p.yaml", data))
    assert found(report) == [("FIELD_IGNORED", "warning", "$.steps[1].query_parser")]
    assert report.diagnostics[0].message == (
        "query_parser 'RegexParser' is not available here and is ignored: the query is read "
        "as JsonishQueryParser reads it (a JSON-ish object with `query`, else the text)"
    )


def test_a_null_edge_allowlist_follows_every_edge(sample_index, tmp_path):
    def expand(**fields: Any) -> dict[str, Any]:
        data = {
            "settings": {"entry_step_id": "x", "all": None},
            "steps": [
                {
                    "id": "x",
                    "action": "expand_dependency_tree",
                    "max_nodes": 50,
                    "next": "f",
                    **fields,
                },
                {"id": "f", "action": "finalize", "source": "graph_edges"},
            ],
        }
        p = Pipeline.from_dict(data)
        engine = Engine(p, services=Services(settings=p.settings, node_store=sample_index))
        seeds = ["eshop::main::method::Eshop.Core.Services.BasketService.Total"]
        r = engine.run({"retrieval_seed_nodes": seeds, "repository": "eshop"}, run_id="t")
        assert r.status == "completed", r.error
        return r.state

    every = expand()
    assert every["graph_edges"] != []
    # The older engine's `graph_edge_allowlist: null` validates, directly or from settings.
    for fields, settings in (
        ({"edge_allowlist": None}, {}),
        ({"edge_allowlist_from_settings": "all"}, {"all": None}),
    ):
        steps = [{"id": "x", "action": "expand_dependency_tree", "next": "end", **fields}, END]
        data = {"settings": {"entry_step_id": "x", **settings}, "steps": steps, "inputs": INPUTS}
        assert runtime.validate(write(tmp_path / "p.yaml", data)).diagnostics == []
    assert expand(edge_allowlist=None) == every
    assert expand(edge_allowlist_from_settings="all") == every


def test_search_type_auto_falls_back_to_the_older_default_search_method(sample_index):
    data = {
        "settings": {"entry_step_id": "s", "default_search_method": "bm25"},
        "steps": [
            {"id": "s", "action": "search_nodes", "search_type": "auto", "next": "f"},
            {"id": "f", "action": "finalize", "source": "retrieval_mode"},
        ],
    }
    p = Pipeline.from_dict(data)
    engine = Engine(p, services=Services(settings=p.settings, node_store=sample_index))
    r = engine.run({"last_model_response": '{"query": "basket total"}'}, run_id="t")
    assert (r.status, r.state["final_answer"]) == ("completed", "bm25")


# --- settings nothing reads ------------------------------------------------------------------


class Reader(Action):
    """Reads settings.colour directly."""

    name = "reader"
    summary = "Read a setting."
    reads_settings: ClassVar[tuple[str, ...]] = ("colour",)
    runnable = True


def test_settings_nothing_reads_are_warnings_at_their_key(tmp_path):
    registry = Registry.from_classes(Reader, *(default_registry().get(n) for n in ("finalize",)))
    data = {
        "settings": {
            "entry_step_id": "r",
            "top_k": 3,
            "colour": "blue",
            "budget": 5,
            "native_chat": True,
        },
        "steps": [{"id": "r", "action": "reader", "next": "end"}, {**END, "source": "x"}],
        "inputs": INPUTS,
    }
    report = runtime.validate(write(tmp_path / "p.yaml", data), registry=registry)
    assert [(d.code, d.severity, d.path, d.message) for d in report.diagnostics] == [
        (
            "SETTING_UNUSED",
            "warning",
            "$.settings.budget",
            "setting 'budget' is read by nothing in this pipeline",
        ),
        (
            "SETTING_UNUSED",
            "warning",
            "$.settings.native_chat",
            "setting 'native_chat' (the older engine's chat-template switch) is read by "
            "nothing in this pipeline",
        ),
    ]
    assert (report.errors, report.warnings) == (0, 2)


# --- the snapshot trio (runs on branches: tests/test_snapshot_trio.py) ---------------------


def test_a_fork_without_its_search_action_is_a_schema_error_not_a_refusal(tmp_path):
    data = {
        "settings": {"entry_step_id": "f"},
        "steps": [
            {"id": "f", "action": "fork_action", "snapshots": {"a": "x"}, "next": "end"},
            END,
        ],
    }
    path = write(tmp_path / "p.yaml", data)
    errors = [f for f in found(runtime.validate(path)) if f[1] == "error"]
    assert errors == [("SCHEMA_MISSING_FIELD", "error", "$.steps[0]")]


# --- the older engine's answer variables --------------------------------------------------------


def test_finalize_takes_the_older_engines_answer_variables():
    data = {"settings": {"entry_step_id": "f"}, "steps": [{"id": "f", "action": "finalize"}]}
    engine = Engine(Pipeline.from_dict(data))
    cases = [
        ({"answer_neutral": "en", "answer_translated": None, "last_model_response": "m"}, "en"),
        ({"answer_neutral": "en", "answer_translated": "pl", "translate_chat": True}, "pl"),
        ({"answer_neutral": "en", "answer_translated": "pl"}, "en"),
        ({"answer_neutral": "en", "answer_translated": None, "translate_chat": True}, "en"),
        ({"answer": "a", "answer_neutral": "en"}, "a"),  # `answer` still comes first
        ({"answer_neutral": None, "last_model_response": "m"}, "m"),  # null is no answer
    ]
    got = [engine.run(state, run_id="t").state["final_answer"] for state, _ in cases]
    assert got == [expected for _, expected in cases]


# --- packs ------------------------------------------------------------------------------------


def test_an_index_of_files_is_not_a_pack_but_a_pack_with_a_pipeline_is(tmp_path):
    index = {"YAMLpipelines": {"P0": {"pipeline_file": "a.yaml"}, "P1": {"scenario": "b"}}}
    [diag] = runtime.validate(write(tmp_path / "i.yaml", index)).diagnostics
    assert (diag.code, diag.line, diag.path) == ("YAML_NOT_A_PIPELINE", 1, "$.YAMLpipelines")
    assert "(their fields: pipeline_file, scenario)" in diag.message
    # One entry that is a pipeline: every entry is checked as a pipeline, as before.
    pack = {
        "YAMLpipelines": [
            {"name": "a", "pipeline_file": "x.yaml"},
            {"name": "b", "settings": {"entry_step_id": "end"}, "steps": [END], "inputs": INPUTS},
        ]
    }
    codes = [d.code for d in runtime.validate(write(tmp_path / "p.yaml", pack)).diagnostics]
    assert codes == ["ENTRY_STEP_MISSING", "SCHEMA_MISSING_FIELD", "SCHEMA_UNKNOWN_FIELD"]
