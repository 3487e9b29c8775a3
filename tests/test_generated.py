"""Generated files are current: schema, error table, CLI reference, action field tables."""

from __future__ import annotations

import json

import jsonschema
import pytest

from runtime import docgen


@pytest.mark.parametrize("path", sorted(docgen.outputs()), ids=lambda p: p.name)
def test_generated_file_is_current(path):
    expected = docgen.outputs()[path]
    assert path.exists(), f"{path} missing: run `python -m runtime.docgen`"
    assert path.read_text(encoding="utf-8") == expected, (
        f"{path} is stale: run `python -m runtime.docgen`"
    )


def test_checked_in_schema_is_a_valid_2020_12_schema():
    schema = json.loads((docgen.ROOT / "schemas" / "pipeline.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_code_is_in_the_errors_page():
    from runtime import codes

    page = (docgen.ROOT / "docs" / "errors.md").read_text()
    assert all(f"`{name}`" in page for name in codes.CODES)


def test_every_action_has_a_page_whose_example_validates():
    import re

    from runtime.contract.registry import default_registry
    from runtime.format.loader import read_yaml
    from runtime.format.schema import action_def

    reg = default_registry()
    for name in reg.names():
        page = docgen.ROOT / "docs" / "actions" / f"{name}.md"
        assert page.is_file(), f"no docs page for action {name}"
        text = page.read_text()
        for section in (
            "## What it does",
            "## Fields",
            "## State read and written",
            "## Outcomes and transitions",
            "## Error codes",
            "## Example",
        ):
            assert section in text, (name, section)
        [example] = re.findall(r"## Example\n\n```yaml\n(.*?)```", text, re.S)
        [step] = read_yaml(f"{name}.md", example).documents[0]  # our loader keeps `on:` a string
        assert step["action"] == name
        jsonschema.Draft202012Validator(action_def(reg.get(name))).validate(step)
