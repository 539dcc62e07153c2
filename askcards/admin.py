"""Operator console (SPEC §8): inspect and cancel asks, manage agents and bots, see deliveries.

Lifecycle rows (asks, audit, outbox) are read-only here: every change goes through the same
services as the API, so an operator action writes the audit row, the outbox event and the card
update exactly like any other actor. Secrets are write-only: no page ever renders one, except a
freshly generated agent key or webhook secret, shown once in a message right after it is made.
"""
from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten, flatten_fieldsets, quote, unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.functional import cached_property
from django.utils.text import Truncator
from django.utils.translation import ngettext

from . import crypto, dashboard, presenters, selectors, services, tools
from .errors import InvalidInput, WebUserNotGranted
from .models import Agent, Ask, AskEvent, Bot, CardMessage, OutboxEvent, ProgressCard, Respondent, Session

if TYPE_CHECKING:
    from typing import TypedDict

    from django_stubs_ext import WithAnnotations

    class OpenCount(TypedDict):
        """What SessionAdmin's queryset annotates each session with."""

        open_count: int

# The index links the operator dashboard (AskAdmin.dashboard_view).
admin.site.index_template = "admin/askcards/index.html"

# ------------------------------------------------------------------------------------ large lists


class EstimatedCountPaginator(Paginator):
    """Pages of a list whose table may hold millions of rows: the count behind the page links is
    PostgreSQL's estimate there (``selectors.changelist_count``), never a ``COUNT(*)`` over the
    whole table; each page itself is the exact rows."""

    @cached_property
    def count(self) -> int:
        if not isinstance(self.object_list, QuerySet):  # a list handed over by other code
            return len(self.object_list)
        return selectors.changelist_count(self.object_list)


class LargeListAdmin(admin.ModelAdmin):
    """For the lists of the tables that grow with use (asks, sessions, audit, outbox): no full
    count (the "N total" link would count every row) and an estimated page count. Each filter
    these lists offer, and their ordering, is served by an index (tests/admin/test_large_lists.py
    checks the plans on PostgreSQL)."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False


def count_of(related: QuerySet[Any], key: str) -> Coalesce:
    """A correlated ``COUNT`` of ``related`` rows whose ``key`` is the listed row: evaluated for the
    page's rows only, where a join and GROUP BY would aggregate the whole table before the LIMIT."""
    counted = related.filter(**{key: OuterRef("pk")}).order_by().values(key).annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)


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


# ------------------------------------------------------------------------------------------- asks


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return flatten(self.fields or ())

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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


class OperatorTimeZoneMedia:
    """Every askcards admin page sets the operator's time zone cookie (see askcards.timezones)
    and has the ask page's and dashboard's styles."""

    js = ("askcards/admin/timezone.js",)
    css = {"all": ("askcards/admin/admin.css",)}


def operator(request: HttpRequest) -> str:
    """The audit actor of an operator's action."""
    return f"operator:{request.user.get_username()}"


def operator_cancel(request: HttpRequest, ask: Ask) -> bool:
    """The list action and the ask page's button: the same service call, reason and actor."""
    return services.ask_cancel(ask=ask, reason=Ask.Reason.BY_OPERATOR, actor=operator(request))


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


# --------------------------------------------------------------------------------------- sessions


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


# ----------------------------------------------------------------------------------------- agents


def _formfield(field: models.Field, **kwargs: Any) -> forms.Field | None:
    # Django 6 makes https the scheme a bare host gets; opt in now (and silence the warning).
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)


class _WebhookUrlForm(forms.ModelForm):
    def clean_webhook_url(self) -> str:
        # The service's check (scheme, metadata and private addresses), shown on the field.
        try:
            return services.agent_webhook_url_check(url=self.cleaned_data["webhook_url"])
        except InvalidInput as exc:
            raise forms.ValidationError(exc.message) from None


class AgentAddForm(_WebhookUrlForm):
    class Meta:
        model = Agent
        fields = ("name", "webhook_url", "web_users", "bots")
        formfield_callback = _formfield


QUOTA_FIELDS = (
    "quota_pending_asks", "quota_pending_per_respondent", "quota_parked_waits", "quota_asks_per_minute",
    "quota_ask_burst",
)


class AgentChangeForm(_WebhookUrlForm):
    class Meta:
        model = Agent
        fields = ("name", "webhook_url", "is_active", "web_users", "bots", *QUOTA_FIELDS)
        formfield_callback = _formfield

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in QUOTA_FIELDS:  # what blank means here: the deployment's default, shown
            default = getattr(settings, f"ASKCARDS_{name.upper()}")
            self.fields[name].help_text += f" Default: {default or 'no limit'}; 0 is no limit."


AGENT_COLUMNS = ("name", "webhook_url", "is_active", *QUOTA_FIELDS)  # what the change form writes on the row itself


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    """Agents are created by ``services.agent_create``; the key exists in clear only in one message."""

    Media = OperatorTimeZoneMedia

    list_display = ("name", "key_prefix", "is_active", "webhook_url", "webhook_secret_set", "event_seq", "created_at")
    list_filter = ("is_active", "created_at")
    search_fields = ("name", "key_hint", "webhook_url")
    ordering = ("name",)
    actions = ("rotate_key", "rotate_webhook_secret")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    readonly_fields = ("key_prefix", "webhook_secret_set", "event_seq", "created_at")
    filter_horizontal = ("web_users", "bots")

    def get_form(self, request: HttpRequest, obj: Agent | None = None, change: bool = False, **kwargs: Any):
        kwargs["form"] = AgentChangeForm if obj is not None else AgentAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Agent | None = None) -> Any:
        if obj is None:
            return [(None, {"fields": ("name", "webhook_url", "web_users", "bots")})]
        return [
            (None, {"fields": (
                "name", "key_prefix", "is_active", "webhook_url", "webhook_secret_set", "web_users", "bots", "event_seq",
                "created_at",
            )}),
            ("Quotas", {"fields": QUOTA_FIELDS, "description": (
                "Over a quota, the agent's request is refused with HTTP 429 and Retry-After, and nothing changes. "
                "Blank: the deployment's default (ASKCARDS_QUOTA_* settings)."
            )}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj is not None else ()

    @admin.display(description="key starts with")
    def key_prefix(self, agent: Agent) -> str:
        return f"{agent.key_hint}…" if agent.key_hint else "-"

    @admin.display(description="webhook secret set", boolean=True)
    def webhook_secret_set(self, agent: Agent) -> bool:
        return bool(agent.webhook_secret)

    def save_model(self, request: HttpRequest, obj: Agent, form: forms.ModelForm, change: bool) -> None:
        if not change:
            created, key = services.agent_create(name=obj.name, webhook_url=obj.webhook_url)
            obj.pk = created.pk
            obj.refresh_from_db()
            obj._state.adding = False
            self.message_user(
                request,
                f"Agent {created.name} created. Its API key is shown this once; copy it now: {key}",
                messages.SUCCESS,
            )
            if created.webhook_secret:
                self._show_webhook_secret(request, created)
            return
        # Only the form's columns: a full save would write back a stale event_seq or key hash.
        obj.save(update_fields=list(AGENT_COLUMNS))
        if obj.webhook_url and not obj.webhook_secret:
            # A webhook is always signed: an agent given a URL gets a secret, as at creation.
            self._new_webhook_secret(request, obj)

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        # Grants go through the services (one rule, logged with the operator), not the form's m2m save.
        usernames = [user.get_username() for user in form.cleaned_data.get("web_users", ())]
        actor = f"operator:{request.user.get_username()}"
        granted, revoked = services.agent_grants_set(agent=form.instance, usernames=usernames, actor=actor)
        self._report_grants(request, form.instance, "ask", granted, revoked, "its asks already pending there")
        granted_bots, revoked_bots = services.agent_bots_set(
            agent=form.instance, bots=list(form.cleaned_data.get("bots", ())), actor=actor
        )
        self._report_grants(request, form.instance, "use", [str(bot) for bot in granted_bots],
                            [str(bot) for bot in revoked_bots], "its cards already sent")
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def _report_grants(self, request: HttpRequest, agent: Agent, verb: str, granted: list[str], revoked: list[str],
                       kept: str) -> None:
        if granted:
            self.message_user(request, f"Agent {agent.name} may now {verb}: {', '.join(granted)}.", messages.SUCCESS)
        if revoked:
            self.message_user(
                request, f"Agent {agent.name} may no longer {verb}: {', '.join(revoked)} ({kept} stay answerable).",
                messages.SUCCESS,
            )

    @admin.action(description="Rotate key (the old key stops working at once)", permissions=("change",))
    def rotate_key(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset.order_by("name"):
            key = services.agent_rotate_key(agent=agent)
            self.message_user(
                request,
                f"New key for agent {agent.name}; the old key no longer works. "
                f"It is shown this once; copy it now: {key}",
                messages.SUCCESS,
            )

    @admin.action(description="Rotate webhook secret", permissions=("change",))
    def rotate_webhook_secret(self, request: HttpRequest, queryset: QuerySet[Agent]) -> None:
        for agent in queryset.order_by("name"):
            self._new_webhook_secret(request, agent)

    def _new_webhook_secret(self, request: HttpRequest, agent: Agent) -> None:
        agent.webhook_secret = crypto.new_webhook_secret()
        agent.save(update_fields=["webhook_secret"])
        self._show_webhook_secret(request, agent)

    def _show_webhook_secret(self, request: HttpRequest, agent: Agent) -> None:
        self.message_user(
            request,
            f"Webhook signing secret of agent {agent.name}, shown this once; copy it now: {agent.webhook_secret}",
            messages.SUCCESS,
        )

    def has_delete_permission(self, request: HttpRequest, obj: Agent | None = None) -> bool:
        # Deleting an agent would orphan its open cards; deactivate it instead.
        return False


# ------------------------------------------------------------------------------------------- bots

SECRET_FIELDS = ("app_secret", "verification_token", "encrypt_key", "api_secret")
PLATFORM_SECRETS: dict[str, tuple[str, ...]] = {
    Bot.Platform.FEISHU: ("app_secret", "verification_token", "encrypt_key"),
    Bot.Platform.DINGTALK: ("app_secret", "api_secret"),
}


def _secret_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=help_text,
    )


class BotForm(forms.ModelForm):
    """Secrets are write-only: never rendered, a blank field keeps the stored value."""

    app_secret = _secret_field("App secret / client secret", "Feishu app_secret or DingTalk client secret.")
    verification_token = _secret_field("Verification token", "Feishu only.")
    encrypt_key = _secret_field("Encrypt key", "Feishu only.")
    api_secret = _secret_field("API secret", "DingTalk only: signs HTTP card callbacks.")
    clear_secrets = forms.MultipleChoiceField(
        label="Clear secrets",
        required=False,
        choices=[(name, name) for name in SECRET_FIELDS[1:]],
        widget=forms.CheckboxSelectMultiple,
        help_text="Remove these stored secrets (the app secret cannot be cleared).",
    )

    class Meta:
        model = Bot
        fields = (
            "platform",
            "app_id",
            "name",
            "base_url",
            "template_id",
            "callback_mode",
            "is_active",
            *SECRET_FIELDS,
        )
        formfield_callback = _formfield
        labels = {"app_id": "App ID / client ID (robotCode)"}
        help_texts = {
            "base_url": "Feishu: https://open.feishu.cn or https://open.larksuite.com; "
            "DingTalk: https://api.dingtalk.com. Left blank when adding, the platform's default is used."
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        adding = self.instance.pk is None
        if "base_url" in self.fields:
            self.fields["base_url"].required = not adding
        for name in SECRET_FIELDS:
            # The decrypted value must not even sit in the form's initial data.
            self.initial[name] = ""
            if adding:
                continue
            state = "Set; leave blank to keep it." if getattr(self.instance, name) else "Not set."
            self.fields[name].help_text = f"{state} {self.fields[name].help_text}"
        if adding:
            self.fields["app_secret"].required = True
            del self.fields["clear_secrets"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        to_clear = set(cleaned.get("clear_secrets") or ())
        for name in SECRET_FIELDS:
            if name in to_clear:
                cleaned[name] = ""
            elif not cleaned.get(name) and self.instance.pk is not None:
                cleaned[name] = getattr(self.instance, name)
        return cleaned


@admin.register(Bot)
class BotAdmin(admin.ModelAdmin):
    Media = OperatorTimeZoneMedia

    form = BotForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ("__str__", "platform", "app_id", "name", "base_url", "callback_mode", "is_active", "secrets")
    list_filter = ("platform", "callback_mode", "is_active")
    search_fields = ("app_id", "name", "template_id")
    ordering = ("platform", "app_id")
    readonly_fields = ("secrets", "created_at")

    def get_fields(self, request: HttpRequest, obj: Bot | None = None) -> tuple[str, ...]:
        fields: tuple[str, ...] = (
            "platform", "app_id", "name", "base_url", "template_id", "callback_mode", "is_active", *SECRET_FIELDS,
        )
        if obj is not None:
            fields += ("clear_secrets", "secrets", "created_at")
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Bot | None = None) -> tuple[str, ...]:
        # The platform decides which secrets mean what; changing it is adding another bot.
        return (*self.readonly_fields, "platform") if obj is not None else ()

    @admin.display(description="secrets")
    def secrets(self, bot: Bot) -> str:
        names = PLATFORM_SECRETS.get(bot.platform, SECRET_FIELDS)
        return ", ".join(f"{name}: {'set' if getattr(bot, name) else 'not set'}" for name in names)

    def save_model(self, request: HttpRequest, obj: Bot, form: forms.ModelForm, change: bool) -> None:
        if change:
            obj.save()
            return
        data = form.cleaned_data
        created = services.bot_add(
            platform=obj.platform,
            app_id=obj.app_id,
            app_secret=data["app_secret"],
            base_url=obj.base_url,
            name=obj.name,
            verification_token=data["verification_token"],
            encrypt_key=data["encrypt_key"],
            api_secret=data["api_secret"],
            template_id=obj.template_id,
            callback_mode=obj.callback_mode,
            is_active=obj.is_active,
        )
        obj.pk = created.pk
        obj.refresh_from_db()
        obj._state.adding = False


# ----------------------------------------------------------------------------- outbox and audit


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
