"""Agents: their keys (shown once), webhook, quotas and grants, written through the services."""
from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import crypto, services
from ..errors import InvalidInput
from ..models import Agent
from .common import OperatorTimeZoneMedia, operator, url_scheme_formfield


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
        formfield_callback = url_scheme_formfield


QUOTA_FIELDS = (
    "quota_pending_asks", "quota_pending_per_respondent", "quota_parked_waits", "quota_asks_per_minute",
    "quota_ask_burst",
)


class AgentChangeForm(_WebhookUrlForm):
    class Meta:
        model = Agent
        fields = ("name", "webhook_url", "is_active", "web_users", "bots", *QUOTA_FIELDS)
        formfield_callback = url_scheme_formfield

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
        actor = operator(request)
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
