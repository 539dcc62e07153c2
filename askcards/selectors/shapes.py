"""The public shapes of asks and events (API, events feed, webhooks and MCP agree)."""
from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from rest_framework import serializers

from .. import tools
from ..models import Ask, OutboxEvent, Respondent


# ------------------------------------------------------------------------------ public shapes
#
# An ask and an event leave the service four ways: agent API responses, the /events feed, webhook
# bodies (the outbox signs and POSTs them) and MCP's structuredContent. One serializer per shape
# builds all four, and the served OpenAPI schema is generated from these same classes
# (askcards.api.serializers uses them), so what is documented is what is sent. They live here,
# below the API, because the outbox may not import askcards.api.


@functools.cache
def _bound(shape: type[OutputSerializer]) -> OutputSerializer:
    return shape()


# An output-only serializer. ``Shape.of(obj)`` is ``Shape(obj).data``, rendered by one shared
# instance: a new serializer binds a copy of every field (for an ask that costs far more than the
# rendering itself), while ``to_representation`` keeps no state, so threads may share one. (No
# docstring: the schema would show it as the description of every shape that has none.)
class OutputSerializer(serializers.Serializer):
    # Fields named like a Serializer attribute (fields, data, parent) carry `type: ignore[assignment]`:
    # DRF's metaclass takes declared fields off the class, so they shadow nothing at run time, but
    # the stubs read them as overriding the attribute.

    @classmethod
    def of(cls, instance: Any) -> Any:
        return _bound(cls).to_representation(instance)


class IsoDateTime(serializers.DateTimeField):
    """A stored time in ISO 8601, UTC written ``Z``. DRF's own field converts every value to the
    current time zone first, which costs more than the rest of an ask's rendering; stored times are
    already UTC."""

    def to_representation(self, value: datetime) -> str:
        return value.isoformat().replace("+00:00", "Z")


class _BlankAsNull:
    """Output: an empty string (an unset reason or surface) reads as null."""

    def to_representation(self, value):
        return None if value == "" else super().to_representation(value)


class _BlankAsNullChar(_BlankAsNull, serializers.CharField):
    pass


class _BlankAsNullChoice(_BlankAsNull, serializers.ChoiceField):
    pass


class SessionRefOutput(OutputSerializer):
    """The session an ask or event belongs to."""

    id = serializers.CharField()
    key = serializers.CharField()


class AskTargetOutput(OutputSerializer):
    """Whom a targeted ask collects from (DingTalk); null for an ordinary ask."""

    type = serializers.ChoiceField(choices=[Ask.Target.USER, Ask.Target.GROUP], source="target_type")
    id = serializers.CharField(source="target_id", help_text="The user's or the group's id")

    def to_representation(self, ask: Ask):
        return None if ask.target_type == Ask.Target.NONE else super().to_representation(ask)


class RespondentOutput(OutputSerializer):
    id = serializers.CharField(source="respondent_id")
    status = serializers.ChoiceField(choices=Respondent.Status.choices)
    answered_at = IsoDateTime(allow_null=True)
    surface = _BlankAsNullChar(allow_null=True, help_text="Where the answer came from")


class AskOutput(OutputSerializer):
    """An ask: `questions` (ask_user_questions) or `fields` (a DingTalk form), never both;
    `result` is null while the ask is open."""

    id = serializers.CharField()
    session = SessionRefOutput()
    tool = serializers.ChoiceField(choices=list(tools.REGISTRY))
    status = serializers.ChoiceField(choices=Ask.Status.choices)
    reason = _BlankAsNullChoice(choices=Ask.Reason.choices, allow_null=True, help_text="Set once terminal")
    title = serializers.CharField(allow_blank=True)
    questions = serializers.JSONField(required=False, help_text="Absent when the ask has fields")
    fields = serializers.JSONField(  # type: ignore[assignment]  # a declared field: see OutputSerializer
        required=False, help_text="Absent when the ask has questions"
    )
    target = AskTargetOutput(source="*", allow_null=True)
    respondents = RespondentOutput(many=True)
    surfaces = serializers.ListField(child=serializers.CharField(), help_text="Where the ask is shown")
    deadline = IsoDateTime()
    created_at = IsoDateTime()
    closed_at = IsoDateTime(allow_null=True)
    result = serializers.JSONField(
        allow_null=True,
        help_text="Once terminal: answers (ask_user_questions) or responses (DingTalk), tool_result and/or message",
    )

    def to_representation(self, ask: Ask):
        data = super().to_representation(ask)
        del data["questions" if ask.fields is not None else "fields"]
        return data


class EventDataOutput(OutputSerializer):
    """What an event says, by type: `ask.closed` (`ask` with its result, `status`, `reason`),
    `ask.progress` (`ask`, `received` of `total` respondents), `session.cancel_requested`
    (`session`, `by`)."""

    ask = AskOutput(required=False)
    session = SessionRefOutput(required=False)
    status = serializers.ChoiceField(choices=Ask.Status.choices, required=False)
    reason = serializers.ChoiceField(choices=Ask.Reason.choices, required=False)
    received = serializers.IntegerField(required=False)
    total = serializers.IntegerField(required=False)
    by = serializers.CharField(required=False, help_text="Who cancelled the session's task")

    def to_representation(self, event: OutboxEvent):
        # What the transition recorded: a declared key it lacks is left out, an undeclared one is
        # not sent (declare it here, and the schema documents it).
        about: dict[str, Any] = dict(event.data)
        if event.ask_id is not None:
            about["ask"] = event.ask
        if event.session_id is not None:
            about["session"] = event.session
        return super().to_representation(about)


class EventOutput(OutputSerializer):
    """An event: one item of the /events feed, and the body of its webhook."""

    seq = serializers.IntegerField()
    type = serializers.ChoiceField(choices=OutboxEvent.Type.choices)
    created_at = IsoDateTime()
    data = EventDataOutput(source="*")  # type: ignore[assignment]  # a declared field: see OutputSerializer


def ask_data(ask: Ask) -> dict[str, Any]:
    """The public shape of an ask (``AskOutput``)."""
    return AskOutput.of(ask)


def event_data(event: OutboxEvent) -> dict[str, Any]:
    """The public shape of an event (``EventOutput``): a feed item and a webhook body."""
    return EventOutput.of(event)
