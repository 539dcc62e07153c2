"""The outbox and the audit trail, read-only."""
from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import ngettext

from askcards.operators import presenters
from askcards import services
from ..models import AskEvent, OutboxEvent
from .common import LargeListAdmin, OperatorTimeZoneMedia


class DeliveryStateFilter(admin.SimpleListFilter):
    title = "delivery"
    parameter_name = "delivery"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("waiting", "waiting"), ("delivered", "delivered"), ("failed", "given up")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[OutboxEvent]) -> QuerySet[OutboxEvent]:
        if self.value() == "waiting":
            return queryset.filter(delivered_at__isnull=True, failed_at__isnull=True)
        if self.value() == "delivered":
            return queryset.filter(delivered_at__isnull=False)
        if self.value() == "failed":
            return queryset.filter(delivered_at__isnull=True, failed_at__isnull=False)
        return queryset


class ReadOnlyAdmin(LargeListAdmin):
    Media = OperatorTimeZoneMedia

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    list_display = (
        "agent",
        "seq",
        "type",
        "ask_ref",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "failed_at",
        "last_error",
    )
    list_filter = (DeliveryStateFilter, "type", "agent", "created_at")
    search_fields = ("ask__id", "session__key", "last_error")
    list_select_related = ("agent",)
    # Newest first by id (the order they were appended in): the primary key serves it.
    ordering = ("-id",)
    actions = ("retry_delivery",)

    @admin.display(description="ask", ordering="ask_id")
    def ask_ref(self, event: OutboxEvent) -> str:
        return event.ask_id or "-"

    @admin.action(description="Retry delivery now", permissions=("retry",))
    def retry_delivery(self, request: HttpRequest, queryset: QuerySet[OutboxEvent]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        due = services.events_retry(event_ids=ids)
        text = ngettext(
            "%(k)d of %(n)d event is due for delivery now.", "%(k)d of %(n)d events are due for delivery now.", len(ids)
        ) % {"k": due, "n": len(ids)}
        if due < len(ids):
            text += ngettext(" %(m)d was already delivered.", " %(m)d were already delivered.", len(ids) - due) % {
                "m": len(ids) - due
            }
        self.message_user(request, text, messages.SUCCESS if due == len(ids) else messages.WARNING)

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{OutboxEvent._meta.app_label}.change_outboxevent")


@admin.register(AskEvent)
class AskEventAdmin(ReadOnlyAdmin):
    """The audit trail is append-only: nobody adds, edits or deletes a row here."""

    list_display = ("created_at", "ask_ref", "what", "status_change", "by", "surface", "details")
    # Each filter is an index at a million rows; the surface and status of a row are in the ask's
    # own audit trail (its page), which its ask_event_ask_idx serves.
    list_filter = ("kind", "created_at")
    search_fields = ("ask__id", "actor")
    ordering = ("-id",)
    fields = ("ask", "created_at", "what", "status_change", "by", "surface", "details", "kind", "actor", "detail")

    @admin.display(description="ask", ordering="ask_id")
    def ask_ref(self, event: AskEvent) -> str:
        return event.ask_id

    @admin.display(description="what happened", ordering="kind")
    def what(self, event: AskEvent) -> str:
        return presenters.kind_label(event.kind)

    @admin.display(description="status")
    def status_change(self, event: AskEvent) -> str:
        return presenters.status_change(event)

    @admin.display(description="by", ordering="actor")
    def by(self, event: AskEvent) -> str:
        return presenters.actor_label(event.actor)

    @admin.display(description="details")
    def details(self, event: AskEvent) -> str:
        return presenters.detail_text(event)
