"""The served OpenAPI schema's error responses: which error codes each operation may answer, under
which status, each documented with the one error shape (``ErrorOutput``).

The codes are the ones the API really sends (``askcards.errors``, ``askcards.api.auth``,
``askcards.api.errors``, ``askcards.edge``); tests/api/test_schema.py provokes each documented
status of every operation and checks the body against this schema and its code against the list.
No 429: the API has no rate limit.
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse

from askcards.errors import AskNotPending, InvalidInput, NotFound, UnknownTool, WebUserNotGranted

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
    NotFound.code: (NotFound.status, "no such object of this agent (another agent's reads the same), or a `format`"),
    "not_acceptable": (406, "the Accept header excludes application/json"),
    AskNotPending.code: (AskNotPending.status, "the ask had already ended"),
    "request_too_large": (413, "the body is over the limit (any body, on a long-poll GET)"),
    "unsupported_media_type": (415, "the body is not application/json"),
}

# Every code an error body may carry (``ErrorCodeEnum``): the documented ones, and the 405 a method
# no operation has is answered with (no operation documents it, as it is not one of them).
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


def responses(ok: dict[int, Any], *codes: str) -> dict[int, Any]:
    """An operation's responses: ``ok`` (status -> output serializer), then one error response per
    status among ``ANY`` and ``codes``, its description listing those codes."""
    from .serializers import ErrorOutput  # serializers read ERROR_CODES from here

    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(ANY + codes):
        by_status.setdefault(CODES[code][0], []).append(code)
    documented: dict[int, Any] = dict(ok)
    for status, listed in sorted(by_status.items()):
        description = "; ".join(f"`{code}`: {CODES[code][1]}" for code in listed)
        documented[status] = OpenApiResponse(ErrorOutput, description=description)
    return documented
