"""Sessions: their open asks and progress cards; an operator may re-grant their web user or bot."""
from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import services
from ..errors import WebUserNotGranted
from ..models import Ask, ProgressCard, Session
from .common import LargeListAdmin, OperatorTimeZoneMedia, ReadOnlyInline, count_of

if TYPE_CHECKING:
    from typing import TypedDict

    from django_stubs_ext import WithAnnotations

    class OpenCount(TypedDict):
        """What SessionAdmin's queryset annotates each session with."""

        open_count: int


class ProgressCardInline(ReadOnlyInline):
    """The session's Feishu progress cards, one per run, newest first, with their sync state."""

    model = ProgressCard
    fields = ("created_at", "status", "cancel_requested_at", "title", "sender_id", "message", "synced", "last_error")
    ordering = ("-id",)

    @admin.display(description="Feishu message")
    def message(self, card: ProgressCard) -> str:
        message = card.card_messages.first()
        return (message.message_id or "(not sent yet)") if message else "-"

    @admin.display(description="shows latest state", boolean=True)
    def synced(self, card: ProgressCard) -> bool | None:
        message = card.card_messages.first()
        return message.synced_version >= message.version if message else None

    @admin.display(description="last error")
    def last_error(self, card: ProgressCard) -> str:
        message = card.card_messages.first()
        return message.last_error if message else ""


class SessionForm(forms.ModelForm):
    class Meta:
        model = Session
        fields = ("web_user",)

    def clean_web_user(self) -> str:
        web_user = self.cleaned_data["web_user"]
        if "web_user" in self.changed_data:
            agent = self.instance.agent
            try:
                services.session_check_web_user(agent=agent, web_user=web_user)
            except WebUserNotGranted:
                raise forms.ValidationError(
                    f"Agent {agent.name} is not granted a web user {web_user!r} (no such user, or no grant): "
                    "grant it on the agent's page first, or leave this empty."
                ) from None
        return web_user


@admin.register(Session)
class SessionAdmin(LargeListAdmin):
    """Sessions are created by agents through the API; an operator may only re-point the web panel
    (to a user the agent is granted)."""

    Media = OperatorTimeZoneMedia

    form = SessionForm

    list_display = ("id", "key", "agent", "platform", "chat_type", "user_id", "web_user", "open_asks", "created_at")
    list_filter = ("platform", "chat_type", "agent", "created_at")
    search_fields = ("id", "key", "user_id", "user_name", "chat_id", "web_user")
    list_select_related = ("agent",)
    ordering = ("-created_at",)
    fields = (
        "id",
        "key",
        "agent",
        "platform",
        "bot",
        "chat_type",
        "chat_id",
        "user_id",
        "user_name",
        "web_user",
        "parent",
        "open_asks",
        "created_at",
        "updated_at",
    )
    editable_fields = ("web_user",)
    inlines = (ProgressCardInline,)

    def get_readonly_fields(self, request: HttpRequest, obj: Session | None = None) -> list[str]:
        return [name for name in self.fields if name not in self.editable_fields]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        return super().get_queryset(request).annotate(open_count=count_of(Ask.objects.filter(status__in=Ask.OPEN), "session"))

    @admin.display(description="open asks", ordering="open_count")
    def open_asks(self, session: WithAnnotations[Session, OpenCount]) -> int:
        return session.open_count

    def save_model(self, request: HttpRequest, obj: Session, form: forms.ModelForm, change: bool) -> None:
        # Only the edited column: a full save would overwrite fields the API changed meanwhile.
        obj.save(update_fields=[*self.editable_fields, "updated_at"])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        return False
