"""The served OpenAPI schema's contract beyond the serializers: which of the error codes
(``askcards.api.codes``) each operation may answer, under which status, each documented with the
one error shape (``ErrorOutput``); the response headers those errors carry; and request bodies
that are closed objects.

tests/api/test_schema.py provokes each documented status of every operation and checks the body
against this schema and its code against the list, and tests/api/test_schemathesis.py runs
schemathesis against the schema the app serves.
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from askcards.errors import InvalidInput, NotFound

from .codes import CODES
from .serializers import ErrorOutput

# What every operation may answer, whatever it does.
ANY = (
    "bad_request",
    "not_authenticated",
    "invalid_key",
    "agent_inactive",
    NotFound.code,
    "not_acceptable",
    "request_too_large",
)
# Operations that read a JSON body; those that validate query parameters.
BODY = (InvalidInput.code, "malformed_json", "unsupported_media_type")
QUERY = (InvalidInput.code,)

# The headers error responses carry, by status.
HEADERS = [
    OpenApiParameter(
        "WWW-Authenticate", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[401], required=True,
        description="`Bearer`: the scheme the agent key is sent with",
    ),
    OpenApiParameter(
        "Retry-After", OpenApiTypes.INT, OpenApiParameter.HEADER, response=[429], required=True,
        description="Seconds until the request may succeed",
    ),
]


def responses(ok: dict[int, Any], *codes: str, when: dict[str, str] | None = None) -> dict[int, Any]:
    """An operation's responses: ``ok`` (status -> output serializer), then one error response per
    status among ``ANY`` and ``codes``, its description listing those codes (``when``: what a code
    means for this operation, instead of its general description)."""
    when = when or {}
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(ANY + codes):
        by_status.setdefault(CODES[code][0], []).append(code)
    documented: dict[int, Any] = dict(ok)
    for status, listed in sorted(by_status.items()):
        description = "; ".join(f"`{code}`: {when.get(code, CODES[code][1])}" for code in listed)
        documented[status] = OpenApiResponse(ErrorOutput, description=description)
    return documented


def operation(
    operation_id: str,
    ok: dict[int, Any],
    *codes: str,
    when: dict[str, str] | None = None,
    parameters: list[Any] | None = None,
    **kwargs: Any,
):
    """``extend_schema`` for one operation: its responses (``responses``), the query parameters
    (a ``QueryParams`` serializer, each field one parameter with its constraints) and the headers
    its error responses carry."""
    return extend_schema(
        operation_id=operation_id,
        responses=responses(ok, *codes, when=when),
        parameters=[*(parameters or []), *HEADERS],
        **kwargs,
    )


class ClosedRequestBodies(OpenApiSerializerExtension):
    """Request bodies are closed objects (``additionalProperties: false``): ``StrictSerializer``
    answers 400 to a key it does not know, so the schema says so."""

    target_class = "askcards.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema
