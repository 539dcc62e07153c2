"""Every error code the agent API sends, with its HTTP status and when it is sent: the codes come
from ``askcards.errors``, ``askcards.api.auth``, ``askcards.api.errors`` and ``askcards.http.edge``.

The error shape (``serializers.ErrorOutput``) lists them as its ``code`` enum; the schema
(``schema``) documents, per operation, which of them it may answer.
"""
from __future__ import annotations

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
