"""Agents (the callers, their keys, quotas and grants) and the platform bots they may use."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .fields import EncryptedTextField


class Agent(models.Model):
    name = models.CharField(max_length=100, unique=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    key_hint = models.CharField(max_length=12, editable=False, help_text="First characters of the key")
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = EncryptedTextField(blank=True)
    is_active = models.BooleanField(default=True)
    # The grants: the only Django users a session of this agent may name as its web_user (whose
    # panel shows the asks). Operators give them (askcards_agent grant, admin); see services.
    web_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="askcards_agents",
        verbose_name="web users granted",
        help_text="The Django users whose web panel this agent may ask (a session's web_user).",
    )
    # The bots granted: the only Feishu / DingTalk apps a session of this agent may name, so an
    # agent reaches only the chats and people of the apps an operator gave it (services.sessions).
    bots: models.ManyToManyField[Bot, Any] = models.ManyToManyField(
        "Bot",
        blank=True,
        related_name="agents",
        verbose_name="bots granted",
        help_text="The Feishu and DingTalk bots this agent's sessions may use.",
    )
    # Quotas (services.quotas): blank takes the ASKCARDS_QUOTA_* default, 0 is no limit.
    quota_pending_asks = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="pending asks", help_text="Open asks in all (blank: the default)."
    )
    quota_pending_per_respondent = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="pending asks per person",
        help_text="Open asks for any one person (blank: the default).",
    )
    quota_parked_waits = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="parked waits",
        help_text="Long-polls and blocking MCP calls waiting at once, on each server process (blank: the default).",
    )
    quota_asks_per_minute = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="asks per minute", help_text="Sustained creation rate (blank: the default)."
    )
    quota_ask_burst = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="ask burst",
        help_text="Asks that may be made at once before the rate applies (blank: the default).",
    )
    # Last outbox sequence number handed out; bumped under the row lock, so commit order = seq order.
    event_seq = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        # event_seq is only ever bumped by outbox.append's UPDATE; a full save of a stale instance
        # must not write an old value back (the next event would reuse a sequence number).
        if self.pk and not kwargs.get("force_insert") and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                field.name for field in self._meta.concrete_fields if not field.primary_key and field.name != "event_seq"
            ]
        super().save(*args, **kwargs)

    @property
    def is_authenticated(self) -> bool:  # lets DRF treat an agent as request.user
        return True


class AgentRateBucket(models.Model):
    """An agent's creation-rate token bucket (``services.quotas``): every process draws from this
    row, each draw one conditional UPDATE on ``version``."""

    agent = models.OneToOneField(Agent, primary_key=True, on_delete=models.CASCADE, related_name="rate_bucket")
    tokens = models.FloatField()
    updated_at = models.DateTimeField()
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"rate bucket of {self.agent_id}: {self.tokens:.1f}"


class Bot(models.Model):
    class Platform(models.TextChoices):
        FEISHU = "feishu"
        DINGTALK = "dingtalk"

    class CallbackMode(models.TextChoices):
        HTTP = "http"
        STREAM = "stream"

    platform = models.CharField(max_length=10, choices=Platform.choices)
    # Feishu app_id, DingTalk client_id (robotCode).
    app_id = models.CharField(max_length=100)
    name = models.CharField(max_length=100, blank=True)
    app_secret = EncryptedTextField(blank=True)
    verification_token = EncryptedTextField(blank=True)
    encrypt_key = EncryptedTextField(blank=True)
    api_secret = EncryptedTextField(blank=True, help_text="DingTalk: signs HTTP card callbacks")
    template_id = models.CharField(max_length=200, blank=True)
    callback_mode = models.CharField(max_length=10, choices=CallbackMode.choices, default=CallbackMode.HTTP)
    base_url = models.URLField(max_length=300)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["platform", "app_id"], name="bot_platform_app_id_unique"),
            models.CheckConstraint(condition=Q(platform__in=["feishu", "dingtalk"]), name="bot_platform_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.platform}:{self.app_id}"
