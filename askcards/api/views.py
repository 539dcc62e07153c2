"""Agent API (SPEC §7). Thin: validate → service or selector → output serializer.

A GET never writes: reading an ask or the event feed changes nothing. Taking delivery is a POST:
a terminal ask's result in a POST response (``tools/call``, ``asks/{id}/wait``, ``asks/{id}/cancel``)
counts as handed over (services.ask_result_returned), and ``POST /events/ack`` acknowledges the
feed (services.events_acknowledge)."""
from __future__ import annotations

from typing import Any, Callable

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from askcards.wake import events
from askcards.http import jsonlimits
from askcards import selectors, services
from askcards.errors import AskNotPending, InvalidInput
from askcards.models import Ask

from . import schema
from . import serializers as s
from .longpoll import LongPoll, LongPollResponse, parks_here


# What a 404 means where the path names an object: the schema cannot know which ids exist.
NO_SESSION = "the path names no session of this agent (an id or key that does not exist, or another agent's), or a `format`"
NO_ASK = "the path names no ask of this agent (an id that does not exist, or another agent's), or a `format`"
TOO_MANY_WAITS = (
    "this agent already has as many parked waits as its quota allows; `Retry-After` says in how many seconds "
    "to try again"
)


def _validated(serializer_class, data) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _body(request) -> Any:
    """The JSON object the request sent; an empty body reads as {}. Size, nesting and text were
    checked by the parser (``askcards.api.parsers.BoundedJSONParser``)."""
    data = request.data
    if not isinstance(data, dict):
        got = jsonlimits.kind(data)
        raise InvalidInput(f"request body must be a JSON object ({{...}}), got {got}")
    return data


class SessionUpsertApi(APIView):
    @schema.operation(
        "session_upsert",
        {200: s.SessionOutput, 201: s.SessionOutput},
        *schema.BODY, "web_user_not_granted", "bot_not_granted",
        request=s.SessionUpsertInput,
        when={
            "invalid_input": "a field is wrong; or, what the schema cannot know: the platform of a new `key` cannot be "
            "inferred (give `platform`), or the user id a Feishu key names is too long for a user id",
            "not_found": "`parent` is no session of this agent",
        },
        description="Create the session of `key`, or update the fields given (201 created, 200 updated). "
        "Values the schema cannot check are answered with a declared 4xx: a `bot` that is not granted to this "
        "agent or no active bot (403, the same answer), a `web_user` not granted (403), a `parent` that is no "
        "session of this agent (404), a new `key` whose platform cannot be inferred without `platform` (400).",
    )
    def post(self, request):
        data = _validated(s.SessionUpsertInput, _body(request))
        agent = request.user
        if "bot" in data:
            data["bot"] = services.session_bot(agent=agent, app_id=data["bot"], platform=data.get("platform"), key=data["key"])
        if "parent" in data:
            data["parent"] = selectors.session_get(agent=agent, session_ref=data["parent"])
        session, created = services.session_upsert(agent=agent, **data)
        return Response(s.SessionOutput.of(session), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class SessionDetailApi(APIView):
    @schema.operation("session_read", {200: s.SessionOutput}, when={"not_found": NO_SESSION})
    def get(self, request, session_id: str):
        return Response(s.SessionOutput.of(selectors.session_get(agent=request.user, session_ref=session_id)))


class SessionToolsApi(APIView):
    @schema.operation("session_tools", {200: s.ToolOutput(many=True)}, when={"not_found": NO_SESSION})
    def get(self, request, session_id: str):
        session = selectors.session_get(agent=request.user, session_ref=session_id)
        return Response([s.ToolOutput.of(tool) for tool in s.offered_tools(session)])


class SessionMessageApi(APIView):
    @schema.operation(
        "session_message", {200: s.RecoverOutput}, *schema.BODY, request=s.MessageInput, when={"not_found": NO_SESSION}
    )
    def post(self, request, session_id: str):
        session = selectors.session_get(agent=request.user, session_ref=session_id)
        data = _validated(s.MessageInput, _body(request))
        invalidated = services.session_message(session=session, sender_id=data["sender_id"])
        return Response(s.RecoverOutput.of({"invalidated": invalidated}))


class SessionProgressApi(APIView):
    """The Feishu progress card of the session's current run (SPEC §6.1); asks mount on it."""

    @schema.operation(
        "session_progress", {200: s.ProgressOutput}, *schema.BODY, "bot_not_granted", request=s.ProgressInput,
        when={"not_found": NO_SESSION,
              "bot_not_granted": "the report would start a new card, and the session's bot is not (or no longer) "
              "granted to this agent; reports on the card already sent still update it"},
    )
    def put(self, request, session_id: str):
        session = selectors.session_get(agent=request.user, session_ref=session_id)
        data = _validated(s.ProgressInput, _body(request))
        card = services.progress_put(session=session, **data)
        return Response(s.ProgressOutput.of(card))


class SessionRecoverApi(APIView):
    @schema.operation(
        "session_recover", {200: s.RecoverOutput}, *schema.BODY, request=None, when={"not_found": NO_SESSION}
    )
    def post(self, request, session_id: str):
        session = selectors.session_get(agent=request.user, session_ref=session_id)
        _validated(s.NoInput, _body(request))
        return Response(s.RecoverOutput.of({"invalidated": services.session_recover(session=session)}))


class AgentRecoverApi(APIView):
    @schema.operation("agent_recover", {200: s.RecoverOutput}, *schema.BODY, request=None)
    def post(self, request):
        _validated(s.NoInput, _body(request))
        return Response(s.RecoverOutput.of({"invalidated": services.agent_recover(agent=request.user)}))


def _ask_now(agent, ask_id: str, *, final: bool, deliver: bool, shape: Callable[[Ask], Any]) -> Any:
    """The ask as it is now, rendered by ``shape``; None while it is still open and the caller
    may keep waiting (``final`` False: a parked wait's re-read).

    ``deliver`` (POST only): a terminal ask's result in this response counts as handed to its
    agent (services.ask_result_returned: not webhooked again, its retention clock starts)."""
    ask = selectors.ask_get(agent=agent, ask_id=ask_id)  # one statement, whether open or not
    if not final and ask.is_open:
        return None
    selectors.with_respondents(ask)  # the shapes list them
    if deliver:
        services.ask_result_returned(ask=ask)
    return shape(ask)


def _ask_waited(request, ask_id: str, *, wait: int, deliver: bool, shape: Callable[[Ask], Any]) -> Response:
    """The request's agent's ask in a response; while it is open and the client waits, a long-poll
    on it. Served by ``LongPollApp`` (``parks_here``), the wait parks without reading: the app's
    re-read once the waiter is registered is the first read (the ask, one statement; another
    agent's ask is its 404), then one after every wake, and it renders the ask once it has ended.
    Elsewhere (plain WSGI) the ask is read and answered at once. A client that waits by sending
    the wait again every minute thus costs two reads of the ask and one rendering a minute."""
    agent = request.user

    def now(final: bool) -> Any:
        return _ask_now(agent, ask_id, final=final, deliver=deliver, shape=shape)

    if wait and parks_here(request):
        response = LongPollResponse(later=lambda: now(True))
        response.long_poll = LongPoll(keys=[events.ask_key(ask_id)], timeout=wait, again=now, agent_id=agent.pk)
        return response
    return Response(now(True))


def _tool_call_data(ask: Ask) -> dict[str, Any]:
    return s.ToolCallOutput.of({"status": ask.status, "ask": ask, "tool_result": (ask.result or {}).get("tool_result")})


class ToolCallApi(APIView):
    """Run a tool call. With ``wait``, a blocking call waits up to that many seconds for its result."""

    @schema.operation(
        "tool_call",
        {200: s.ToolCallOutput},
        *schema.BODY, "unknown_tool", "web_user_not_granted", "bot_not_granted", "quota_exceeded",
        request=s.ToolCallInput,
        when={
            "web_user_not_granted": "the session's web user is not (or no longer) granted to this agent",
            "bot_not_granted": "the session's bot is not (or no longer) granted to this agent",
            "not_found": "`session` is no session of this agent",
            "quota_exceeded": "the call would make an ask past a quota of this agent: too many pending asks, "
            "too many pending asks for one respondent, or asks made too fast; `Retry-After` says in how many "
            "seconds to try again",
        },
        description="Run a tool call. With `wait`, a blocking call waits up to that many seconds for its result. "
        "Answers 200 whenever the tool ran, failures the model must see included (`status: failed`, "
        "`tool_result` says why: arguments are checked against the tool's own `input_schema`, not here). "
        "Values the schema cannot check are answered with a declared 4xx: a `session` that is no session "
        "of this agent (404), one whose web user or bot is not granted (403).",
    )
    def post(self, request):
        data = _validated(s.ToolCallInput, _body(request))
        agent = request.user
        session = selectors.session_get(agent=agent, session_ref=data["session"])
        if data["wait"]:
            services.quota_check_parked(agent=agent)  # before the call: a refusal changes nothing
        outcome = services.tool_call(
            agent=agent,
            session=session,
            name=data["name"],
            arguments=data["arguments"],
            call_id=data.get("call_id"),
            sender_id=data["sender_id"],
            timeout_seconds=data.get("timeout_seconds"),
        )
        if outcome.ask is None:
            data = {"status": outcome.status, "ask": None, "tool_result": outcome.tool_result}
            return Response(s.ToolCallOutput.of(data))
        return _ask_waited(request, outcome.ask.id, wait=data["wait"], deliver=True, shape=_tool_call_data)


class AskListApi(APIView):
    @schema.operation(
        "ask_list",
        {200: s.AskListOutput},
        *schema.QUERY,
        parameters=[s.AskListQuery],
        when={"not_found": "`session` is no session of this agent, or a `format`"},
    )
    def get(self, request):
        query = _validated(s.AskListQuery, request.query_params)
        session = (
            selectors.session_get(agent=request.user, session_ref=query["session"]) if "session" in query else None
        )
        asks = selectors.ask_page(agent=request.user, session=session, status=query.get("status"), limit=query["limit"])
        return Response(s.AskListOutput.of({"asks": asks}))


class AskDetailApi(APIView):
    """Read an ask. A terminal ask's result read here is not yet delivered: see POST /asks/{id}/wait."""

    @schema.operation("ask_read", {200: s.AskOutput}, when={"not_found": NO_ASK})
    def get(self, request, ask_id: str):
        return Response(s.AskOutput.of(selectors.ask_get(agent=request.user, ask_id=ask_id)))


class AskWaitApi(APIView):
    """Long-poll (≤ 60 s) until the ask is terminal; returns the ask either way.

    GET only reads. POST also takes delivery: a terminal ask's result in its response counts as
    handed over (its ask.closed event is not webhooked; the answers' retention clock starts), as
    a result in the tools/call response does. ``POST {"timeout": 0}`` takes it without waiting."""

    @schema.operation(
        "ask_wait", {200: s.AskOutput}, *schema.QUERY, "quota_exceeded", parameters=[s.WaitQuery],
        when={"not_found": NO_ASK, "quota_exceeded": TOO_MANY_WAITS},
    )
    def get(self, request, ask_id: str):
        query = _validated(s.WaitQuery, request.query_params)
        return self._wait(request, ask_id, query["timeout"], deliver=False)

    @schema.operation(
        "ask_wait_deliver", {200: s.AskOutput}, *schema.BODY, "quota_exceeded", request=s.WaitInput,
        when={"not_found": NO_ASK, "quota_exceeded": TOO_MANY_WAITS},
    )
    def post(self, request, ask_id: str):
        data = _validated(s.WaitInput, _body(request))
        return self._wait(request, ask_id, data["timeout"], deliver=True)

    @staticmethod
    def _wait(request, ask_id: str, timeout: int, *, deliver: bool) -> Response:
        if timeout:
            services.quota_check_parked(agent=request.user)
        return _ask_waited(request, ask_id, wait=timeout, deliver=deliver, shape=s.AskOutput.of)


class AskCancelApi(APIView):
    @schema.operation(
        "ask_cancel", {200: s.AskOutput}, *schema.BODY, "ask_not_pending", request=s.CancelInput,
        when={"not_found": NO_ASK},
    )
    def post(self, request, ask_id: str):
        data = _validated(s.CancelInput, _body(request))
        ask = selectors.ask_get(agent=request.user, ask_id=ask_id)
        if not services.ask_cancel(ask=ask, reason=data["reason"], actor=f"agent:{request.user.name}"):
            ask.refresh_from_db()
            raise AskNotPending(f"ask {ask.id} is already {ask.status} ({ask.reason}); nothing was cancelled")
        return Response(_ask_now(request.user, ask_id, final=True, deliver=True, shape=s.AskOutput.of))


def _events_page(agent, after: int, limit: int, *, final: bool) -> dict[str, Any] | None:
    page = selectors.events_after(agent=agent, after=after, limit=limit)
    if not page and not final:
        return None
    return s.EventsOutput.of({"events": page, "last_seq": page[-1].seq if page else after})


class EventsApi(APIView):
    """The agent's events after ``after``. Reading acknowledges nothing: POST /events/ack does."""

    @schema.operation(
        "events_read", {200: s.EventsOutput}, *schema.QUERY, "quota_exceeded", parameters=[s.EventsQuery],
        when={"quota_exceeded": TOO_MANY_WAITS},
    )
    def get(self, request):
        query = _validated(s.EventsQuery, request.query_params)
        agent, after, limit = request.user, query["after"], query["limit"]
        if query["wait"]:
            services.quota_check_parked(agent=agent)

        def page(final: bool) -> dict[str, Any] | None:
            return _events_page(agent, after, limit, final=final)

        if query["wait"] and parks_here(request):
            # As ``_ask_waited``: the app's read once the waiter is registered is the first one.
            response = LongPollResponse(later=lambda: page(True))
            response.long_poll = LongPoll(keys=[events.agent_key(agent.pk)], timeout=query["wait"], again=page,
                                          agent_id=agent.pk)
            return response
        return Response(page(True))


class EventsAckApi(APIView):
    """The agent has handled its events up to ``upto``: they count as delivered (not webhooked
    again; the results they carry start their retention clock). Acknowledging again is harmless."""

    @schema.operation("events_ack", {200: s.EventsAckOutput}, *schema.BODY, request=s.EventsAckInput)
    def post(self, request):
        data = _validated(s.EventsAckInput, _body(request))
        acknowledged = services.events_acknowledge(agent=request.user, upto=data["upto"])
        return Response(s.EventsAckOutput.of({"acknowledged": acknowledged}))
