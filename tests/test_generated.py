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
