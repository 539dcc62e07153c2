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

from askcards.api import codes
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
    assert set(components["ErrorCodeEnum"]["enum"]) == {*codes.CODES, "method_not_allowed"}
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


def test_request_bodies_are_closed_objects():
    """The serializers refuse an unknown field (400), so every request body says so."""
    document = generate()
    bodies = {
        operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rpartition("/")[2]
        for item in document["paths"].values()
        for operation in item.values()
        if "requestBody" in operation
    }
    assert bodies
    for name in bodies:
        assert document["components"]["schemas"][name]["additionalProperties"] is False, name


def test_query_parameters_declare_what_is_validated():
    paths = generate()["paths"]

    def query(path, method="get"):
        return {p["name"]: p["schema"] for p in paths[path][method]["parameters"] if p["in"] == "query"}

    assert query("/api/v1/asks")["limit"] == {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}
    assert query("/api/v1/asks")["session"] == {"type": "string", "minLength": 1, "maxLength": 500, "pattern": "\\S"}
    assert query("/api/v1/asks/{ask_id}/wait")["timeout"] == {"type": "integer", "minimum": 0, "maximum": 60, "default": 30}
    events = query("/api/v1/events")
    assert events["after"] == {"type": "integer", "format": "int64", "minimum": 0, "maximum": 2**63 - 1, "default": 0}
    assert events["wait"] == {"type": "integer", "minimum": 0, "maximum": 60, "default": 0}
    assert events["limit"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}


# Operations that answer 403 bot_not_granted, and those that answer 429 quota_exceeded (Retry-After).
QUOTA = {("post", "/api/v1/tools/call"), ("get", "/api/v1/asks/{ask_id}/wait"), ("post", "/api/v1/asks/{ask_id}/wait"),
         ("get", "/api/v1/events")}
BOT_GRANT = {("post", "/api/v1/sessions"), ("post", "/api/v1/tools/call"), ("put", "/api/v1/sessions/{session_id}/progress")}


def test_error_responses_declare_their_codes_and_headers():
    document = generate()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "`invalid_key`" in responses["401"]["description"], (method, path)
            assert "WWW-Authenticate" in responses["401"]["headers"], (method, path)
            assert "`request_too_large`" in responses["413"]["description"], (method, path)
            if (method, path) in QUOTA:
                assert "`quota_exceeded`" in responses["429"]["description"], (method, path)
                assert responses["429"]["headers"]["Retry-After"]["schema"] == {"type": "integer"}
            else:
                assert "429" not in responses, (method, path)
            assert ((method, path) in BOT_GRANT) == ("`bot_not_granted`" in responses.get("403", {}).get("description", ""))
    assert "405 `method_not_allowed`" in document["info"]["description"]
