"""The agent API's input validation, and its output serializers: every response body is one of
these, so the served schema (generated from them) is what is sent.

Outputs are rendered with ``Shape.of(instance)`` (``askcards.selectors.OutputSerializer``). The ask
and event shapes are defined in ``askcards.selectors`` and used here as they are: webhooks and MCP
send the same shapes, and the outbox may not import the API.
"""
from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from askcards import services, tools
from askcards.models import Ask, ProgressCard, Session
from askcards.selectors import AskOutput, EventOutput, IsoDateTime, OutputSerializer, SessionRefOutput

from .codes import ERROR_CODES

MAX_WAIT_SECONDS = 60
# Sequence numbers and other integers the database stores as 64-bit.
MAX_BIGINT = 2**63 - 1
# POST /tools/call's status (ToolCallStatusEnum): the ask's status when the call made or found an
# ask; "failed" for a tool-level failure before one; "ok" (a DingTalk list) and "cancelled" (a
# DingTalk cancel) for actions that make none.
TOOL_CALL_STATUSES = (*Ask.Status.values, "ok")


class StrictSerializer(serializers.Serializer):
    """Rejects unknown keys, so a typo in a field name is an error instead of being ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                expected = f"expected one of: {', '.join(self.fields)}" if self.fields else "this request takes no fields"
                raise serializers.ValidationError({name: [f"unknown field; {expected}"] for name in unknown})
        return super().to_internal_value(data)


# What the schema says of a text that may not be blank: surrounding whitespace is trimmed (DRF's
# CharField), so a text of whitespace alone is blank. It documents that rule; the check itself is
# CharField's ("This field may not be blank."), which runs first.
NOT_BLANK = RegexValidator(r"\S", message="This field may not be blank.")


class Text(serializers.CharField):
    """Text as the schema declares it: ``max_length`` counts what was sent (before the trimming
    of surrounding whitespace), and a text that may not be blank has a ``\\S`` pattern."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.allow_blank:
            self.validators.append(NOT_BLANK)

    def to_internal_value(self, data):
        if isinstance(data, str) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


class JsonString(Text):
    """A JSON string: a number or boolean sent for a text field is an error, not silently text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class WebUrl(JsonString):
    """An http:// or https:// URL without whitespace, or blank: what a card can link to. Not
    trimmed, so the pattern the schema declares is exactly what is checked."""

    PATTERN = r"^(?:https?://[^\s/?#]+(?:[/?#]\S*)?)?$"

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, allow_blank=True, **kwargs)
        self.validators.append(RegexValidator(
            self.PATTERN, message="Enter an http:// or https:// URL without spaces, or an empty string for no link."
        ))


@extend_schema_field({"type": "string", "enum": list(tools.REGISTRY)})
class ToolName(serializers.CharField):
    """A tool's name: the schema lists the tools. A name that is none of them is still read here
    and refused by the call itself (400 ``unknown_tool``, naming the tools there are)."""

    MAX_LENGTH = 64  # longer is no tool's name, and is not echoed back

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        if len(data) > self.MAX_LENGTH:
            raise serializers.ValidationError(f"Ensure this field has no more than {self.MAX_LENGTH} characters.")
        return super().to_internal_value(data)


class JsonInteger(serializers.IntegerField):
    """A JSON number: a quoted number sent in a JSON body is an error (query strings use IntegerField)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class QueryParams(StrictSerializer):
    """A GET's query parameters. A parameter given empty (``limit=``) or more than once is an error,
    not its default or whichever came last: the schema declares each as one value of its type."""

    def to_internal_value(self, data):
        if hasattr(data, "getlist"):
            problems = {}
            for name in self.fields:
                values = data.getlist(name)
                if len(values) > 1:
                    problems[name] = [f"given {len(values)} times; give it once"]
                elif values == [""]:
                    problems[name] = ["empty; give a value, or leave the parameter out for its default"]
            if problems:
                raise serializers.ValidationError(problems)
        return super().to_internal_value(data)


class NoInput(StrictSerializer):
    """Endpoints without parameters: an empty body or {}."""


class SessionUpsertInput(StrictSerializer):
    key = JsonString(max_length=500, help_text="Unique per agent; may contain '/'")
    platform = serializers.ChoiceField(choices=Session.Platform.choices, required=False)
    chat_type = serializers.ChoiceField(choices=Session.ChatType.choices, required=False)
    bot = JsonString(max_length=100, required=False, help_text="The bot's app_id / client_id")
    chat_id = JsonString(max_length=200, required=False, allow_blank=True)
    user_id = JsonString(max_length=200, required=False, allow_blank=True)
    user_name = JsonString(max_length=200, required=False, allow_blank=True)
    web_user = JsonString(max_length=150, required=False, allow_blank=True)
    parent = JsonString(  # type: ignore[assignment]  # a declared field: see selectors.OutputSerializer
        max_length=500, required=False, help_text="Parent session id or key (sub-agent)"
    )


class MessageInput(StrictSerializer):
    sender_id = JsonString(max_length=200, required=False, allow_blank=True, default="")


class ProgressInput(StrictSerializer):
    """Omitted title, content and detail_url keep what the card shows (within a run)."""

    status = serializers.ChoiceField(choices=ProgressCard.Status.choices)
    title = JsonString(max_length=500, required=False, allow_blank=True)
    content = JsonString(max_length=100_000, required=False, allow_blank=True, help_text="Markdown; cut to fit the card")
    sender_id = JsonString(
        max_length=200, required=False, allow_blank=True, default="",
        help_text="Open_id of the person the task answers (owns the card's forms and cancel button); default the session's user_id",
    )
    detail_url = WebUrl(max_length=1000, required=False, help_text="The card's detail button opens it; empty for none")
    reply_to = JsonString(max_length=200, required=False, allow_blank=True, default="", help_text="Message id the first card replies to")


class ToolCallInput(StrictSerializer):
    session = JsonString(max_length=500, help_text="Session id or key")
    name = ToolName()
    arguments = serializers.JSONField(
        allow_null=True,  # any JSON the model produced, null too: a wrong value is a tool-level failure
        help_text="The model's tool input, validated against the tool's input_schema",
    )
    call_id = JsonString(max_length=200, required=False, allow_null=True, help_text="Idempotency key")
    sender_id = JsonString(max_length=200, required=False, allow_blank=True, default="")
    wait = JsonInteger(min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=0)
    timeout_seconds = JsonInteger(
        min_value=1, max_value=services.MAX_TIMEOUT_SECONDS, required=False, allow_null=True,
        help_text="The ask's deadline in seconds (at most 13 days: Feishu cards stop working after 14); "
        "dingtalk_ask_user_question takes its own timeoutMinutes instead",
    )


class AskListQuery(QueryParams):
    session = Text(required=False, max_length=500, help_text="Only this session's asks: its id or key")
    status = serializers.ChoiceField(choices=Ask.Status.choices, required=False, help_text="Only asks in this status")
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False, default=50, help_text="At most this many asks, newest first")


class WaitQuery(QueryParams):
    timeout = serializers.IntegerField(
        min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=30,
        help_text="Wait up to this many seconds while the ask is open; 0 answers at once",
    )


class CancelInput(StrictSerializer):
    reason = serializers.ChoiceField(
        choices=[Ask.Reason.BY_AGENT, Ask.Reason.PAUSE_FAILED], required=False, default=Ask.Reason.BY_AGENT
    )


class EventsQuery(QueryParams):
    after = serializers.IntegerField(
        min_value=0, max_value=MAX_BIGINT, required=False, default=0,
        help_text="Return events after this seq (the last you have)",
    )
    wait = serializers.IntegerField(
        min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=0,
        help_text="Long-poll up to this many seconds when nothing is new",
    )
    limit = serializers.IntegerField(min_value=1, max_value=500, required=False, default=100, help_text="At most this many events")


class WaitInput(StrictSerializer):
    timeout = JsonInteger(min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=30)


class EventsAckInput(StrictSerializer):
    upto = JsonInteger(min_value=0, max_value=MAX_BIGINT, help_text="The last seq you have handled: acknowledges it and all before")


# ------------------------------------------------------------------------------ outputs


class ToolOutput(OutputSerializer):
    name = serializers.ChoiceField(choices=list(tools.REGISTRY))
    description = serializers.CharField()
    input_schema = serializers.JSONField(help_text="JSON Schema of the tool's arguments, exactly what is validated")


def offered_tools(session: Session) -> list[tools.Tool]:
    """The tools a session offers its model (SPEC §4)."""
    return tools.tools_for(platform=session.platform, is_subagent=session.is_subagent)


class ToolsOfSession(serializers.ListSerializer):
    """``SessionOutput.tools``: rendered from the session, as ``offered_tools``."""

    # source="*" hands this list field the session itself, not a list of rows.
    def to_representation(self, session: Session) -> list[dict[str, Any]]:  # type: ignore[override]
        return super().to_representation(offered_tools(session))


class SessionOutput(OutputSerializer):
    id = serializers.CharField()
    key = serializers.CharField()
    platform = serializers.ChoiceField(choices=Session.Platform.choices)
    chat_type = serializers.ChoiceField(choices=Session.ChatType.choices)
    bot = serializers.CharField(source="bot.app_id", allow_null=True, help_text="The bot's app_id / client_id")
    chat_id = serializers.CharField(allow_blank=True)
    user_id = serializers.CharField(allow_blank=True)
    user_name = serializers.CharField(allow_blank=True)
    web_user = serializers.CharField(allow_blank=True)
    parent = serializers.CharField(  # type: ignore[assignment]  # a declared field: see selectors.OutputSerializer
        source="parent_id", allow_null=True, help_text="The parent session's id (sub-agent)"
    )
    tools = ToolsOfSession(child=ToolOutput(), source="*", help_text="What to hand the model for this session")
    created_at = IsoDateTime()


class ProgressOutput(OutputSerializer):
    session = SessionRefOutput()
    status = serializers.ChoiceField(choices=ProgressCard.Status.choices, help_text="As the card shows it")
    title = serializers.CharField(allow_blank=True)
    message_id = serializers.CharField(allow_null=True, help_text="Feishu message id once the card was sent")
    synced = serializers.BooleanField(help_text="The card shows the latest state")
    last_error = serializers.CharField(allow_blank=True, help_text="Why the last update of the card failed")

    def to_representation(self, card: ProgressCard) -> dict[str, Any]:
        message = card.card_messages.first()
        return super().to_representation(
            {
                "session": card.session,
                "status": card.shown_status,
                "title": card.title,
                "message_id": (message.message_id or None) if message else None,
                "synced": message is not None and message.synced_version >= message.version,
                "last_error": message.last_error if message else "",
            }
        )


class ToolCallOutput(OutputSerializer):
    status = serializers.ChoiceField(
        choices=TOOL_CALL_STATUSES,
        help_text="The ask's status; failed: a tool-level failure (tool_result says why); ok: a DingTalk list; "
        "cancelled: also a DingTalk cancel",
    )
    ask = AskOutput(allow_null=True, help_text="Null when the call made no ask (a failure before one, a DingTalk list)")
    tool_result = serializers.CharField(allow_null=True, help_text="The exact string for the model; null while pending")


class AskListOutput(OutputSerializer):
    asks = AskOutput(many=True)


class RecoverOutput(OutputSerializer):
    invalidated = serializers.IntegerField(help_text="How many open asks were invalidated")


class EventsOutput(OutputSerializer):
    events = EventOutput(many=True)
    last_seq = serializers.IntegerField(help_text="The last event's seq; the request's after when there is none")


class EventsAckOutput(OutputSerializer):
    acknowledged = serializers.IntegerField(help_text="Events this call marked delivered (0 when all already were)")


class ErrorDetailOutput(OutputSerializer):
    code = serializers.ChoiceField(choices=ERROR_CODES, help_text="Stable; each response lists the codes it may carry")
    message = serializers.CharField(help_text="What was wrong and what was expected")
    fields = serializers.DictField(  # type: ignore[assignment]  # a declared field: see selectors.OutputSerializer
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="invalid_input: each wrong field or query parameter with its messages",
    )


# The edge (askcards.http.edge) writes this same shape for requests it refuses before any view runs
# (413, a malformed Content-Length): it sits below the API, so it builds the body itself;
# tests/api/test_schema.py checks those bodies against this component too.
class ErrorOutput(OutputSerializer):
    """Every error: a stable `code` and a `message` saying what was wrong and what was expected."""

    error = ErrorDetailOutput()
