"""The OpenAPI schema is generated without a warning and validates (issue 13.6), and its error,
status and reason fields are typed enums that list what the API really sends."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from drf_spectacular import plumbing
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.management.commands.spectacular import SchemaGenerationError

from askcards.api import schema as api_schema
from askcards.models import Ask
from askcards.tools import REGISTRY

# Settings the generator reads instead of ours, to see that the check below can fail.
WITHOUT_ENUM_NAMES = {"ENUM_NAME_OVERRIDES": {}}


def generate(*extra: str) -> dict:
    """``manage.py spectacular --validate --fail-on-warn`` in this process; warnings counted afresh
    (the generator remembers every warning it ever emitted) and enum names read from the settings
    in force (the generator caches them)."""
    GENERATOR_STATS.reset()
    plumbing._load_enum_name_overrides.cache_clear()
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", *extra,
                     stdout=out, stderr=err)
    finally:
        GENERATOR_STATS.reset()
        plumbing._load_enum_name_overrides.cache_clear()
    return json.loads(out.getvalue())


def test_schema_generates_and_validates_without_warnings():
    document = generate()
    assert document["openapi"].startswith("3.")


def test_the_generation_check_fails_on_a_warning():
    with pytest.raises(SchemaGenerationError, match="warnings"):
        generate("--custom-settings", "tests.api.test_schema_generation.WITHOUT_ENUM_NAMES")


@pytest.fixture(scope="module")
def components() -> dict:
    return generate()["components"]["schemas"]


def test_error_code_is_an_enum_of_every_documented_code(components):
    code = components["ErrorDetailOutput"]["properties"]["code"]
    assert code["allOf"] == [{"$ref": "#/components/schemas/ErrorCodeEnum"}]
    assert set(components["ErrorCodeEnum"]["enum"]) == {*api_schema.CODES, "method_not_allowed"}
    assert components["ErrorOutput"]["required"] == ["error"]
    assert components["ErrorDetailOutput"]["required"] == ["code", "message"]


def test_tool_call_status_is_an_enum(components):
    status = components["ToolCallOutput"]["properties"]["status"]
    assert status["allOf"] == [{"$ref": "#/components/schemas/ToolCallStatusEnum"}]
    assert components["ToolCallStatusEnum"]["enum"] == [*Ask.Status.values, "ok"]


def test_ask_status_reason_and_tool_are_enums(components):
    ask = components["AskOutput"]["properties"]
    assert ask["status"] == {"$ref": "#/components/schemas/AskStatusEnum"}
    assert {"$ref": "#/components/schemas/AskReasonEnum"} in ask["reason"]["oneOf"]
    assert components["AskReasonEnum"]["enum"] == Ask.Reason.values
    assert components["ToolNameEnum"]["enum"] == list(REGISTRY)
    assert components["RespondentOutput"]["properties"]["status"] == {"$ref": "#/components/schemas/RespondentStatusEnum"}


def test_every_error_response_documents_the_error_shape():
    document = generate()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            errors = {status: r for status, r in operation["responses"].items() if int(status) >= 400}
            assert errors, f"{method} {path} documents no error"
            for status, response in errors.items():
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorOutput"}, (method, path, status)
                assert "`" in response["description"], (method, path, status)  # lists its codes
