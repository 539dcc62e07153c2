"""The served OpenAPI schema's contract beyond the serializers: which error codes each operation
may answer, under which status, each documented with the one error shape (``ErrorOutput``); the
response headers those errors carry; and request bodies that are closed objects.

The codes are the ones the API sends (``askcards.errors``, ``askcards.api.auth``,
``askcards.api.errors``, ``askcards.edge``); tests/api/test_schema.py provokes each documented
status of every operation and checks the body against this schema and its code against the list,
and tests/api/test_schemathesis.py runs schemathesis against the schema the app serves.
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from askcards.errors import AskNotPending, BotNotGranted, InvalidInput, NotFound, UnknownTool, WebUserNotGranted

# code -> (HTTP status, when it is sent)
CODES: dict[str, tuple[int, str]] = {
    "bad_request": (400, "the request itself is malformed: a bad Content-Length header, too many query parameters, a Host this server does not serve"),
    InvalidInput.code: (InvalidInput.status, "a field or query parameter is wrong: the message and `fields` name it"),
    "malformed_json": (400, "the body is not JSON askcards reads (syntax, NaN, NUL, lone surrogates, nesting over 64)"),
    UnknownTool.code: (UnknownTool.status, "no tool has that name"),
    "not_authenticated": (401, "no `Authorization: Bearer <agent key>` header"),
    "invalid_key": (401, "the Authorization header or the key is wrong"),
    "agent_inactive": (401, "the agent was deactivated"),
    WebUserNotGranted.code: (WebUserNotGranted.status, "the session names a web user no operator granted this agent"),
    BotNotGranted.code: (BotNotGranted.status, "the session names a bot no operator granted this agent (or no active bot has that id)"),
    NotFound.code: (NotFound.status, "no such object of this agent (another agent's reads the same), or a `format`"),
    "not_acceptable": (406, "the Accept header excludes application/json"),
    AskNotPending.code: (AskNotPending.status, "the ask had already ended"),
    "request_too_large": (413, "the body is over the limit (any body, on a long-poll GET)"),
    "unsupported_media_type": (415, "the body is not application/json"),
    "quota_exceeded": (429, "a quota of this agent is used up; `Retry-After` says in how many seconds to try again"),
}

# Every code an error body may carry (``ErrorCodeEnum``): the documented ones, and the 405 a method
# no operation has is answered with (no operation documents it, as it is not one of them: the
# schema's description says it).
ERROR_CODES = (*CODES, "method_not_allowed")

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
    from .serializers import ErrorOutput  # serializers read ERROR_CODES from here

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
