"""Input validation and documented output shapes of the agent API."""
from __future__ import annotations

from rest_framework import serializers

from askcards.models import Ask, ProgressCard, Session

MAX_WAIT_SECONDS = 60


class StrictSerializer(serializers.Serializer):
    """Rejects unknown keys, so a typo in a field name is an error instead of being ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                expected = f"expected one of: {', '.join(self.fields)}" if self.fields else "this request takes no fields"
                raise serializers.ValidationError({name: [f"unknown field; {expected}"] for name in unknown})
        return super().to_internal_value(data)


class JsonString(serializers.CharField):
    """A JSON string: a number or boolean sent for a text field is an error, not silently text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class JsonInteger(serializers.IntegerField):
    """A JSON number: a quoted number sent in a JSON body is an error (query strings use IntegerField)."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            self.fail("invalid")
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
    parent = JsonString(max_length=500, required=False, help_text="Parent session id or key (sub-agent)")


class ToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.JSONField()


class SessionOutput(serializers.Serializer):
    id = serializers.CharField()
    key = serializers.CharField()
    platform = serializers.CharField()
    chat_type = serializers.CharField()
    bot = serializers.CharField(allow_null=True)
    chat_id = serializers.CharField()
    user_id = serializers.CharField()
    user_name = serializers.CharField()
    web_user = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    tools = ToolSerializer(many=True)
    created_at = serializers.DateTimeField()


class MessageInput(StrictSerializer):
    sender_id = JsonString(max_length=200, required=False, allow_blank=True, default="")


class ProgressInput(StrictSerializer):
    status = serializers.ChoiceField(choices=ProgressCard.Status.choices)
    title = JsonString(max_length=500, required=False, allow_blank=True, default="")
    content = JsonString(max_length=100_000, required=False, allow_blank=True, default="", help_text="Markdown; cut to fit the card")
    sender_id = JsonString(
        max_length=200, required=False, allow_blank=True, default="",
        help_text="Open_id of the person the task answers (owns the card's forms and cancel button); default the session's user_id",
    )
    detail_url = serializers.URLField(max_length=1000, required=False, allow_blank=True, default="")
    reply_to = JsonString(max_length=200, required=False, allow_blank=True, default="", help_text="Message id the first card replies to")


class ProgressOutput(serializers.Serializer):
    session = serializers.DictField()
    status = serializers.ChoiceField(choices=ProgressCard.Status.choices, help_text="As the card shows it")
    title = serializers.CharField()
    message_id = serializers.CharField(allow_null=True, help_text="Feishu message id once the card was sent")
    synced = serializers.BooleanField(help_text="The card shows the latest state")
    last_error = serializers.CharField(allow_blank=True)


class ToolCallInput(StrictSerializer):
    session = JsonString(max_length=500, help_text="Session id or key")
    name = JsonString(max_length=64)
    arguments = serializers.JSONField(
        allow_null=True,  # any JSON the model produced, null too: a wrong value is a tool-level failure
        help_text="The model's tool input, validated against the tool's input_schema",
    )
    call_id = JsonString(max_length=200, required=False, allow_null=True, help_text="Idempotency key")
    sender_id = JsonString(max_length=200, required=False, allow_blank=True, default="")
    wait = JsonInteger(min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=0)
    timeout_seconds = JsonInteger(min_value=1, required=False, allow_null=True)


class RespondentOutput(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.CharField()
    answered_at = serializers.DateTimeField(allow_null=True)
    surface = serializers.CharField(allow_null=True)


class AskOutput(serializers.Serializer):
    """Documents ``selectors.ask_data``."""

    id = serializers.CharField()
    session = serializers.DictField()
    tool = serializers.CharField()
    status = serializers.ChoiceField(choices=Ask.Status.choices)
    reason = serializers.ChoiceField(choices=Ask.Reason.choices, allow_null=True)
    title = serializers.CharField()
    questions = serializers.JSONField(required=False)
    fields = serializers.JSONField(required=False)
    target = serializers.JSONField(allow_null=True)
    respondents = RespondentOutput(many=True)
    surfaces = serializers.ListField(child=serializers.CharField())
    deadline = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    result = serializers.JSONField(allow_null=True)


class ToolCallOutput(serializers.Serializer):
    status = serializers.CharField()
    ask = AskOutput(allow_null=True)
    tool_result = serializers.CharField(allow_null=True)


class AskListQuery(StrictSerializer):
    session = serializers.CharField(required=False, max_length=500)
    status = serializers.ChoiceField(choices=Ask.Status.choices, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False, default=50)


class AskListOutput(serializers.Serializer):
    asks = AskOutput(many=True)


class WaitQuery(StrictSerializer):
    timeout = serializers.IntegerField(min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=30)


class CancelInput(StrictSerializer):
    reason = serializers.ChoiceField(
        choices=[Ask.Reason.BY_AGENT, Ask.Reason.PAUSE_FAILED], required=False, default=Ask.Reason.BY_AGENT
    )


class RecoverOutput(serializers.Serializer):
    invalidated = serializers.IntegerField()


class EventsQuery(StrictSerializer):
    after = serializers.IntegerField(min_value=0, required=False, default=0)
    wait = serializers.IntegerField(min_value=0, max_value=MAX_WAIT_SECONDS, required=False, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=500, required=False, default=100)


class EventOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    type = serializers.CharField()
    created_at = serializers.DateTimeField()
    data = serializers.DictField()


class EventsOutput(serializers.Serializer):
    events = EventOutput(many=True)
    last_seq = serializers.IntegerField()
