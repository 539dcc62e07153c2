"""``POST /hooks/claude-code``: an agent host's hook, answered with its decision once a person
answers. Thin: the URL's session and the event → ``services.host_prompt`` → a long-poll on the
ask → ``services.host_reply`` in the host's shape.

Authenticated by the agent key (``Authorization: Bearer``) like every API route; the URL names the
session as ``/mcp``'s does (``?session=<key>`` plus the fields of ``POST /api/v1/sessions`` and
``sender_id``), and ``timeout`` — the hook's own timeout in seconds, as the host's settings give it
— bounds the wait: askcards answers (no decision) ``HOOK_MARGIN_SECONDS`` before the host would
give up. The request is served by ``LongPollApp`` (no thread is held while it waits); when the
host closes it first, the ask is withdrawn everywhere.
"""
from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from rest_framework.views import APIView

from askcards.wake import events
from askcards import services
from askcards.api.longpoll import LongPoll, LongPollResponse
from askcards.errors import InvalidInput
from askcards.mcp.caller import QUERY_FIELDS, caller_from, query_fields
from askcards.tools.host_prompts import HostEventError, Progress

from . import claude_code, codex

DEFAULT_TIMEOUT_SECONDS = 600  # Claude Code's default for a hook
HOOK_MARGIN_SECONDS = 5
MIN_TIMEOUT_SECONDS = 15
URL_FIELDS = (*QUERY_FIELDS, "timeout")


def hook_timeout(value: str | None) -> int:
    """The URL's ``timeout`` (the hook's, in seconds), checked."""
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if not value.isdigit() or not MIN_TIMEOUT_SECONDS <= int(value) <= services.MAX_TIMEOUT_SECONDS:
        raise InvalidInput(f"timeout must be the hook's timeout in whole seconds, from {MIN_TIMEOUT_SECONDS} to "
                           f"{services.MAX_TIMEOUT_SECONDS}, got {value[:40]!r}")
    return int(value)


class HookView(APIView):
    """One agent host's hook endpoint; ``host`` is its module (``read_event``, ``decision``)."""

    host: Any = claude_code
    path = "/hooks/claude-code"
    # How the host reads "no decision" (it carries on as without the hook: its own dialog).
    no_decision_status = 200

    def no_decision(self) -> HttpResponse:
        if self.no_decision_status == 204:
            return HttpResponse(status=204)
        return HttpResponse(b"{}", content_type="application/json")

    def reply(self, data: dict[str, Any] | None) -> Any:
        return self.no_decision() if data is services.NO_DECISION else data

    def post(self, request):
        agent = request.user
        fields = query_fields(request.META.get("QUERY_STRING", "").encode("latin-1"), URL_FIELDS)
        timeout = hook_timeout(fields.pop("timeout", None))
        caller = caller_from(agent, fields, where="hook URL", path=self.path)
        try:
            prompt = self.host.read_event(request.data)
        except HostEventError as exc:
            raise InvalidInput(str(exc)) from None
        if prompt is None:
            return self.no_decision()
        if isinstance(prompt, Progress):
            services.host_progress(session=caller.session, sender_id=caller.sender_id, progress=prompt)
            return self.no_decision()
        services.quota_check_parked(agent=agent)
        wait = timeout - HOOK_MARGIN_SECONDS
        try:
            ask_id = services.host_prompt(agent=agent, session=caller.session, sender_id=caller.sender_id,
                                          prompt=prompt, timeout_seconds=wait)
        except HostEventError as exc:
            raise InvalidInput(str(exc)) from None
        if ask_id is None:
            return self.no_decision()
        decide, ended = self.host.decision, getattr(self.host, "ended", None)

        def again(final: bool):
            data = services.host_reply(agent=agent, ask_id=ask_id, prompt=prompt, decide=decide, final=final,
                                       ended=ended)
            return None if data is None else self.reply(data)

        response = LongPollResponse(later=lambda: _data(again(True)))
        response.long_poll = LongPoll(keys=[events.ask_key(ask_id)], timeout=wait, again=again,
                                      agent_id=agent.pk, leave=lambda: services.host_left(agent=agent, ask_id=ask_id),
                                      lease=ask_id)
        return response


def _data(reply: Any) -> Any:
    """A reply as the data of a response that is not parked (a plain WSGI server): no decision is {}."""
    return {} if isinstance(reply, HttpResponse) else reply


class ClaudeCodeHook(HookView):
    host = claude_code
    path = "/hooks/claude-code"


class CodexHook(HookView):
    """Codex reads an empty stdout as no decision (anything else but its exact shape is an error)."""

    host = codex
    path = "/hooks/codex"
    no_decision_status = 204


# Served by project.asgi through LongPollApp, each under /hooks/.
HOOK_VIEWS = {"claude-code": ClaudeCodeHook, "codex": CodexHook}
