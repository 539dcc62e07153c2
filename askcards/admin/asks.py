"""The asks: the list operators search and filter, an ask's page with its cards and audit, cancelling."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets, quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.text import Truncator
from django.utils.translation import ngettext

from askcards.operators import dashboard, presenters
from askcards import tools
from ..models import Ask, AskEvent, CardMessage, Respondent
from .common import LargeListAdmin, OperatorTimeZoneMedia, ReadOnlyInline, count_of, operator_cancel


class ToolFilter(admin.SimpleListFilter):
    """The tools as a fixed list: Django's default for a plain column lists its distinct values,
    a scan of the whole table on every page."""

    title = "tool"
    parameter_name = "tool"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(name, TOOL_SHORT.get(name, name)) for name in sorted(tools.REGISTRY)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Ask]) -> QuerySet[Ask]:
        return queryset.filter(tool=self.value()) if self.value() else queryset


class ReasonFilter(admin.SimpleListFilter):
    """Why asks ended. Each reason belongs to one status, and the filter names both, so the
    status index (ask_status_created_idx) serves it in created order."""

    title = "reason"
    parameter_name = "reason"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(reason, f"{status} · {reason}") for status, reasons in Ask.REASONS.items() for reason in reasons]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Ask]) -> QuerySet[Ask]:
        status = next((status for status, reasons in Ask.REASONS.items() if self.value() in reasons), None)
        return queryset.filter(status=status, reason=self.value()) if status else queryset


class CardMessageInline(ReadOnlyInline):
    model = CardMessage
    fields = (
        "platform", "bot", "message_id", "open_space_id", "version", "synced_version", "card_reason", "last_error",
        "updated_at",
    )


class AskEventInline(ReadOnlyInline):
    """The audit trail in words: what happened, the status it moved, who did it and why."""

    model = AskEvent
    verbose_name = "audit event"
    verbose_name_plural = "audit trail"
    fields = ("created_at", "what", "status_change", "by", "surface", "details")
    ordering = ("id",)

    @admin.display(description="what happened")
    def what(self, event: AskEvent) -> str:
        return presenters.kind_label(event.kind)

    @admin.display(description="status")
    def status_change(self, event: AskEvent) -> str:
        return presenters.status_change(event)

    @admin.display(description="by")
    def by(self, event: AskEvent) -> str:
        return presenters.actor_label(event.actor)

    @admin.display(description="details")
    def details(self, event: AskEvent) -> str:
        return presenters.detail_text(event)


@admin.register(Ask)
class AskAdmin(LargeListAdmin):
    # Fits a 1,400 px window beside the admin's navigation and the filters: a short id, a clipped
    # title that wraps, the reason with the status, the tool with the platform, compact times.
    # Newest first; the created time is on the ask's page and in the date filter.
    list_display = (
        "short_id",
        "short_title",
        "status_reason",
        "platform_tool",
        "progress",
        "deadline_at",
    )
    list_display_links = ("short_id",)
    # Each filter has an index in the list's order (newest first): status and reason
    # ask_status_created_idx, tool ask_tool_created_idx, platform (the ask's own copy of its
    # session's) ask_platform_created_idx, dates the created_at index.
    list_filter = ("status", ReasonFilter, ToolFilter, "platform", "created_at")
    search_fields = ("id", "title", "session__key", "respondents__respondent_id")
    ordering = ("-created_at",)
    actions = ("cancel_asks",)
    inlines = (CardMessageInline, AskEventInline)
    change_form_template = "admin/askcards/ask/change_form.html"
    fieldsets = (
        (None, {"fields": ("id", "status", "reason_text", "responded", "tool", "title")}),
        ("Who", {"fields": ("agent", "session", "platform", "sender_id", "call_id", "blocking")}),
        (
            "Times",
            {
                "fields": (
                    "deadline",
                    "created_at",
                    "activated_at",
                    "closed_at",
                    "result_delivered_at",
                    "answers_purged_at",
                )
            },
        ),
        (
            "Stored JSON",
            {
                "classes": ("collapse",),
                "fields": ("questions", "fields", "target_type", "target_id", "scope_key", "surfaces", "result"),
            },
        ),
    )

    Media = OperatorTimeZoneMedia

    def get_readonly_fields(self, request: HttpRequest, obj: Ask | None = None) -> list[str]:
        return flatten_fieldsets(self.fieldsets or ())

    def get_queryset(self, request: HttpRequest) -> QuerySet[Ask]:
        # k/N for every row in the same query as the list itself.
        return (
            super()
            .get_queryset(request)
            .annotate(
                respondents_total=count_of(Respondent.objects.all(), "ask"),
                respondents_done=count_of(Respondent.objects.exclude(status=Respondent.Status.PENDING), "ask"),
            )
        )

    def get_urls(self) -> list[URLPattern]:
        cancel = path(
            "<path:object_id>/cancel/",
            self.admin_site.admin_view(self.cancel_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_cancel",
        )
        board = path(
            "dashboard/", self.admin_site.admin_view(self.dashboard_view), name=f"{self.opts.app_label}_dashboard"
        )
        return [board, cancel, *super().get_urls()]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """The operator dashboard: open asks, time to answer, expiries and failures, backlog."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        numbers = dashboard.dashboard()
        context = {
            **self.admin_site.each_context(request),
            "title": "Operator dashboard",
            "opts": self.opts,
            "numbers": numbers,
            "charts": dashboard.charts(numbers),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/askcards/dashboard.html", context)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], add: bool = False, change: bool = False,
        form_url: str = "", obj: Ask | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context.update(
                question=presenters.question_view(obj),
                result=presenters.result_table(obj, list(obj.respondents.order_by("position"))),
                reason_label=presenters.reason_label(obj.reason) if obj.reason else "",
                can_cancel=obj.is_open and self.has_cancel_permission(request),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="id", ordering="id")
    def short_id(self, ask: Ask) -> str:
        # q_ and the first 8 of 32 hex digits: enough to tell asks apart; search takes the full id.
        return f"{ask.id[:10]}…"

    @admin.display(description="title", ordering="title")
    def short_title(self, ask: Ask) -> str:
        return Truncator(ask.title).chars(TITLE_CHARS)

    @admin.display(description="deadline", ordering="deadline")
    def deadline_at(self, ask: Ask) -> str:
        return compact_time(ask.deadline)

    @admin.display(description="status · reason", ordering="status")
    def status_reason(self, ask: Ask) -> str:
        return f"{ask.status} · {ask.reason}" if ask.reason else ask.status

    @admin.display(description="platform · tool", ordering="platform")
    def platform_tool(self, ask: Ask) -> str:
        return f"{ask.platform} · {TOOL_SHORT.get(ask.tool, ask.tool)}"

    @admin.display(description="reason")
    def reason_text(self, ask: Ask) -> str:
        return f"{ask.reason} ({presenters.reason_label(ask.reason)})" if ask.reason else "-"

    @admin.display(description="k/N")
    def progress(self, ask: Ask) -> str:
        """k/N: respondents who are no longer pending, of all respondents."""
        total = getattr(ask, "respondents_total", None)
        done = getattr(ask, "respondents_done", None)
        if total is None or done is None:
            rows = list(ask.respondents.values_list("status", flat=True))
            total, done = len(rows), sum(status != Respondent.Status.PENDING for status in rows)
        return f"{done}/{total}"

    @admin.display(description="responded")
    def responded(self, ask: Ask) -> str:
        return self.progress(ask)

    @admin.action(description="Cancel selected asks", permissions=("cancel",))
    def cancel_asks(self, request: HttpRequest, queryset: QuerySet[Ask]) -> None:
        # One service call per ask: each is its own conditional transition with its own audit
        # row, outbox event and card update; an ask that ended meanwhile is simply not counted.
        asks = list(queryset.order_by("created_at"))
        cancelled = sum(operator_cancel(request, ask) for ask in asks)
        total, skipped = len(asks), len(asks) - cancelled
        text = ngettext("Cancelled %(k)d of %(n)d ask.", "Cancelled %(k)d of %(n)d asks.", total) % {
            "k": cancelled,
            "n": total,
        }
        if skipped:
            text = text[:-1] + ngettext(
                "; %(m)d was no longer pending.", "; %(m)d were no longer pending.", skipped
            ) % {"m": skipped}
        self.message_user(request, text, messages.SUCCESS if not skipped else messages.WARNING)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The ask page's Cancel button (POST): the list action's service call for this one ask."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        ask = self.get_object(request, unquote(object_id))
        if ask is None:
            missing = f"There is no ask {unquote(object_id)!r}; nothing was cancelled."
            self.message_user(request, missing, messages.ERROR)
            return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                                                current_app=self.admin_site.name))
        # An ask already ended is refused here, before the service (whose losing attempt would
        # still leave an audit row): the button changes nothing then.
        if ask.is_open and operator_cancel(request, ask):
            self.message_user(
                request,
                f"Ask {ask.id} cancelled: its cards show it ended and its agent is told (reason by_operator).",
                messages.SUCCESS,
            )
        else:
            ask.refresh_from_db(fields=["status", "reason"])
            ended = f"{ask.status} ({presenters.reason_label(ask.reason)})" if ask.reason else ask.status
            self.message_user(
                request, f"Ask {ask.id} was not cancelled: it has already ended as {ended}. Nothing was changed.",
                messages.ERROR,
            )
        return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                                            args=[quote(ask.pk)], current_app=self.admin_site.name))

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        # Cancelling is the one write an operator makes to an ask; it rides on the change permission
        # while the change form itself stays read-only.
        return request.user.has_perm(f"{Ask._meta.app_label}.change_ask")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Ask | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Ask | None = None) -> bool:
        return False


TITLE_CHARS = 40
TOOL_SHORT = {"ask_user_questions": "questions", "dingtalk_ask_user_question": "form"}  # the list's tool column


def compact_time(value: datetime | None) -> str:
    """A time in the list columns, in the operator's zone: ``2026-12-01 17:14``."""
    return date_format(timezone.localtime(value), "Y-m-d H:i") if value is not None else "-"
