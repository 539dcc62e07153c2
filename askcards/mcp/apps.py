"""MCP Apps (the ``io.modelcontextprotocol/ui`` extension, SEP-1865): the form of an
``ask_user_questions`` call, rendered by a host that shows MCP Apps (claude.ai, ChatGPT, VS Code,
Goose) and answered there, as one more surface (``host_app``).

- ``ask_user_questions`` declares ``_meta.ui.resourceUri`` (and the older flat
  ``_meta["ui/resourceUri"]``) = ``APP_URI``; ``resources/list`` lists it and ``resources/read``
  returns it: one HTML document (``text/html;profile=mcp-app``), the panel's question form and
  texts with a small script speaking the app side of the protocol (``askcards/static/askcards``:
  ``questions.js``, ``mcp_app.js``, inlined; no build step, nothing fetched at run time).
- Two app-only tools (``_meta.ui.visibility: ["app"]``: hosts keep them out of the model's tool
  list): ``askcards_app_ask`` finds the ask a call's questions made (the app is given the call's
  arguments, not the ask's id) and ``askcards_app_answer`` answers it (``services.host_app``).
  Both see only the caller's own asks: its agent (the Bearer key) and the session its URL names.

All of it exists only for a client that declares the extension with the MCP App MIME type
(``client_declares_apps``, the SDK's own rule): on 2026-07-28 in each request's ``_meta`` client
capabilities; on the handshake revisions at ``initialize``, which askcards answers with an
``Mcp-Session-Id`` that records it (``session_token``: signed, so any process reads it back and
nothing is kept on the server). Every other client sees no ``_meta.ui``, no resource and no app
tool (calling one is "unknown tool").

The same signed session id records the other capability askcards needs later on the handshake
revisions: form elicitation (``client_declares_forms``), which the host surface (``host=ask``,
``askcards.mcp.host``) asks the client's own user with.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
from django.core import signing
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from askcards.tools import ANSWER_TEXT_MAX_CHARS

APP_URI = "ui://askcards/ask.html"
LEGACY_URI_META = "ui/resourceUri"  # the flat key of the extension's drafts, still read by hosts
FIND_TOOL = "askcards_app_ask"
ANSWER_TOOL = "askcards_app_answer"
APP_TOOLS = frozenset({FIND_TOOL, ANSWER_TOOL})
SESSION_SALT = "askcards.mcp.apps-session"
STATIC = Path(__file__).resolve().parent.parent / "static" / "askcards"


def client_declares_apps(capabilities: Any) -> bool:
    """Whether client capabilities (the wire object) declare MCP Apps: the extension, with the MCP
    App MIME type among its ``mimeTypes`` (as ``mcp.server.apps.client_supports_apps`` reads a
    connection's; askcards reads them from a request, so it applies the same rule here)."""
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    settings = extensions.get(EXTENSION_ID) if isinstance(extensions, Mapping) else None
    mime_types = settings.get("mimeTypes") if isinstance(settings, Mapping) else None
    return isinstance(mime_types, list) and APP_MIME_TYPE in mime_types


def client_declares_forms(capabilities: Any) -> bool:
    """Whether client capabilities (the wire object) say the client shows form elicitations:
    ``elicitation: {}`` (form, as the spec reads an empty object) or ``elicitation.form``."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
    return isinstance(elicitation, Mapping) and (not elicitation or isinstance(elicitation.get("form"), Mapping))


# ------------------------------------------------------------------ the handshake era's memory


@dataclass(frozen=True)
class Declared:
    """What a client declared at ``initialize`` that askcards reads on its later requests."""

    apps: bool = False  # MCP Apps (the extension with the MCP App MIME type)
    forms: bool = False  # form elicitation


def session_token(agent_id: int, declared: Declared) -> str:
    """The ``Mcp-Session-Id`` an ``initialize`` is answered with when its client declared
    something askcards needs later: what it declared, for this agent, signed with the site's
    secret (HMAC, compared in constant time)."""
    return signing.dumps({"agent": agent_id, "apps": declared.apps, "forms": declared.forms},
                         salt=SESSION_SALT, compress=False)


def session_declares(token: str, *, agent_id: int) -> Declared | None:
    """What a request's ``Mcp-Session-Id`` says this agent's client declared, or None when askcards
    did not issue it for this agent (another server's, a rotated secret's)."""
    try:
        data = signing.loads(token, salt=SESSION_SALT)
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or data.get("agent") != agent_id:
        return None
    return Declared(apps=data.get("apps") is True, forms=data.get("forms") is True)


# ------------------------------------------------------------------------------ the resource


def _static(name: str) -> str:
    text = (STATIC / name).read_text(encoding="utf-8")
    if "</" in text and name.endswith(".js"):  # inlined into <script>: a "</script" would end it
        raise ValueError(f"{name} holds '</', which must not appear in an inlined script")
    return text


@functools.cache
def app_html() -> str:
    """The app's one HTML document: the panel's stylesheet and question form, and the app's
    script, inlined (the host's sandbox allows inline script and style, nothing fetched)."""
    return render_to_string("askcards/mcp_app.html", {
        "style": mark_safe(_static("panel.css") + _static("mcp_app.css")),  # noqa: S308 (our own files)
        "script": mark_safe(_static("questions.js") + "\n" + _static("mcp_app.js")),  # noqa: S308
        "text_max_chars": ANSWER_TEXT_MAX_CHARS,
    })


UI_RESOURCE_META = {"ui": {"prefersBorder": True}}  # no csp: the restrictive default, no network


def resource() -> types.Resource:
    return types.Resource(
        uri=APP_URI, name="askcards-ask", title="askcards 问题表单", mime_type=APP_MIME_TYPE,
        description="The form of an ask_user_questions call, answered in the host (MCP Apps).",
        _meta=UI_RESOURCE_META,
    )


def read_result() -> types.ReadResourceResult:
    contents = types.TextResourceContents(uri=APP_URI, mime_type=APP_MIME_TYPE, text=app_html(), _meta=UI_RESOURCE_META)
    return types.ReadResourceResult(contents=[contents])


# ------------------------------------------------------------------------------------ tools


def tool_meta() -> dict[str, Any]:
    """``_meta`` of a tool the app renders (visible to the model and the app, the default)."""
    return {"ui": {"resourceUri": APP_URI}, LEGACY_URI_META: APP_URI}


_APP_ONLY = {"ui": {"resourceUri": APP_URI, "visibility": ["app"]}}

FIND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["questions"],
    "properties": {
        "questions": {
            "type": "array", "minItems": 1, "maxItems": 4,
            "description": "The ask_user_questions call's questions, as the app was given them",
            "items": {"type": "object", "required": ["question"], "properties": {"question": {"type": "string"}}},
        },
    },
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["askId", "answers"],
    "properties": {
        "askId": {"type": "string", "description": "The ask's id, as askcards_app_ask named it"},
        "answers": {
            "type": "array",
            "description": "One per question: {question, selectedLabels, customInput}, as the panel sends them",
            "items": {"type": "object"},
        },
    },
}


def app_tools() -> list[types.Tool]:
    never = types.ToolExecution(task_support="forbidden")
    return [
        types.Tool(
            name=FIND_TOOL, title="askcards: the call's ask", input_schema=FIND_SCHEMA, execution=never, _meta=_APP_ONLY,
            description="For the askcards MCP App only: the open ask that an ask_user_questions call with these "
                        "questions made in this conversation ({ask: null} until it is delivered).",
        ),
        types.Tool(
            name=ANSWER_TOOL, title="askcards: answer", input_schema=ANSWER_SCHEMA, execution=never, _meta=_APP_ONLY,
            description="For the askcards MCP App only: the person's answer to the ask the app shows. The first "
                        "answer on any surface wins; a later one changes nothing ({accepted: false, status, reason}).",
        ),
    ]


def tool_error(message: str) -> types.CallToolResult:
    """Bad input to an app tool: a tool error whose text says what was wrong."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], structured_content={"error": message}, is_error=True
    )


def tool_result(text: str, structured: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)
