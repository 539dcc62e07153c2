"""The host as a surface on the handshake revisions (2025-06-18, 2025-11-25): ``elicitation/create``
to the MCP client's own user, and their response.

The request goes out on the response stream of the request that waits for the ask — a blocking
``tools/call``, or the ``tasks/result`` of a task that needs input (with the ``related-task``
meta) — as the spec has a server's requests related to a client request. The client answers it
with a POST of its own, which may reach any process, long after: askcards keeps nothing between
the two. The request's JSON-RPC id carries what the response needs, signed
(``django.core.signing``: HMAC with the site's secret, its own salt, compared in constant time):
the ask's id and its agent. Any process verifies the id of a response POST against the Bearer
key's agent, answers the ask through the service the 2026-07-28 ``tasks/update`` uses
(``services.host_respond``: the first answer wins; a decline or a dismissal is the person's
answer), and the call parked wherever it is wakes through the ask's group, as for an answer on
the panel. A response whose content does not answer the form changes nothing and asks the parked
call to put the form again (``ASK_AGAIN`` on the ask's key); an error response (the client could
not show it) changes nothing. A response id askcards did not sign for this agent is refused (400)
and changes nothing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

import mcp_types as types
from pydantic import ValidationError

from askcards.wake import events
from askcards import services
from askcards.errors import NotFound
from askcards.models import Agent, Ask

from . import results

logger = logging.getLogger(__name__)

ID_SALT = "askcards.mcp.host-elicitation"
ID_MAX_AGE = results.REQUEST_STATE_MAX_AGE
LEGACY_FORMS_VERSION = "2025-06-18"  # its elicitation schema: no titled enums, no arrays, no mode
ASK_AGAIN = "askcards.mcp_host_again"  # hub message: the host's form was not answered, put it again
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def request_id(ask: Ask) -> str:
    """The JSON-RPC id of the ``elicitation/create`` putting ``ask`` to the host: its ask and
    agent, signed."""
    return results.signed_ask(ask, salt=ID_SALT)


def ask_of(value: Any, *, agent_id: int) -> str | None:
    """The ask a response's id names, if askcards signed it for this agent (and not too long ago)."""
    return results.ask_signed(value, salt=ID_SALT, agent_id=agent_id, max_age=ID_MAX_AGE)


def elicitation(ask: Ask, version: str, *, task: bool) -> dict[str, Any] | None:
    """The ``elicitation/create`` params for ``ask`` on this revision (None: its form cannot be
    expressed there); ``task``: sent for a task's ``tasks/result``, so it names the task."""
    params = results.host_form(ask, legacy=version == LEGACY_FORMS_VERSION)
    if params is not None and task:
        params["_meta"] = {results.RELATED_TASK_META: {"taskId": ask.id}}
    return params


def is_response(message: Mapping[str, Any]) -> bool:
    """A JSON-RPC response (a client answering a server's request), not a request or notification."""
    return "method" not in message and "id" in message and ("result" in message or "error" in message)


@dataclass(frozen=True)
class Refused:
    """A response POST refused: the HTTP status and the JSON-RPC error it is answered with."""

    status: int
    code: int
    message: str


def take_response(agent: Agent, message: Mapping[str, Any]) -> Refused | None:
    """A client's response to one of askcards' requests (sync: runs in the pool). None: taken
    (HTTP 202), whatever it changed; a Refused when it answers nothing askcards asked this agent."""
    ask_id = ask_of(message.get("id"), agent_id=agent.pk)
    if ask_id is None:
        return Refused(400, INVALID_REQUEST, "Invalid Request: this response's id names no request this server sent "
                                             "to this key's client")
    if "error" in message:
        logger.info("ask %s: the host could not put the form to its user (an error response), ignored", ask_id)
        return None
    try:
        result = types.ElicitResult.model_validate(message.get("result"))
    except ValidationError:
        return Refused(400, INVALID_PARAMS, "Invalid params: the response to elicitation/create must be an "
                                            "elicitation result {action: accept|decline|cancel, content?}")
    try:
        response = services.host_respond(agent=agent, ask_id=ask_id, action=result.action, content=result.content)
    except NotFound:  # signed for an ask since deleted
        logger.info("ask %s: a host response for an ask that is gone, ignored", ask_id)
        return None
    if response.reason is services.HostRefusal.INVALID:
        logger.info("ask %s: the host's form content does not answer it (%s); asking again", ask_id, response.detail)
        events.publish([(events.ask_key(ask_id), {"type": ASK_AGAIN})])
    elif not response.taken:
        logger.info("ask %s: the host's response came after it ended (%s), nothing changed", ask_id,
                    response.ask.reason)
    return None
