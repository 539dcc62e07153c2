"""Sessions (an agent's conversation with a person on a surface) and Feishu progress cards."""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .fields import new_session_id
from .agents import Agent, Bot


class Session(models.Model):
    class Platform(models.TextChoices):
        FEISHU = "feishu"
        DINGTALK = "dingtalk"
        WECHAT = "wechat"
        WEB = "web"

    class ChatType(models.TextChoices):
        P2P = "p2p"
        GROUP = "group"

    id = models.CharField(primary_key=True, max_length=34, default=new_session_id, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    key = models.CharField(max_length=500)
    platform = models.CharField(max_length=10, choices=Platform.choices)
    bot = models.ForeignKey(Bot, null=True, blank=True, on_delete=models.PROTECT, related_name="sessions")
    chat_type = models.CharField(max_length=5, choices=ChatType.choices, default=ChatType.P2P)
    chat_id = models.CharField(max_length=200, blank=True)
    user_id = models.CharField(max_length=200, blank=True)
    user_name = models.CharField(max_length=200, blank=True)
    web_user = models.CharField(max_length=150, blank=True, help_text="Django username whose panel shows the asks")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="session_agent_key_unique"),
            models.CheckConstraint(
                condition=Q(platform__in=["feishu", "dingtalk", "wechat", "web"]), name="session_platform_valid"
            ),
            models.CheckConstraint(condition=Q(chat_type__in=["p2p", "group"]), name="session_chat_type_valid"),
        ]
        indexes = [
            # Admin list, newest first (and its date filter).
            models.Index(fields=["-created_at"], name="session_created_idx"),
            # Panel: pending asks of the sessions a web user sees.
            models.Index(fields=["web_user"], name="session_web_user_idx", condition=~Q(web_user="")),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def is_subagent(self) -> bool:
        return self.parent_id is not None


class ProgressCardQuerySet(models.QuerySet):
    def runs_of(self, session_id: str) -> "ProgressCardQuerySet":
        """The session's cards, newest run first: ``.first()`` is the live one."""
        return self.filter(session_id=session_id).order_by("-id")


class ProgressCard(models.Model):
    """The Feishu task card of one run of a session; the session's latest card is its live one.

    A run starts with the first ``PUT …/progress`` and ends with a terminal status; a later
    ``running`` update starts the next run on a new card message (as the seed posts one card per
    task). Its Feishu message and sync state are the ``CardMessage`` pointing here.
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"
        RECOVERING = "recovering"

    TERMINAL = ("completed", "failed", "cancelled")

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="progress_cards")
    objects = ProgressCardQuerySet.as_manager()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RUNNING)
    title = models.CharField(max_length=500, blank=True)
    content = models.TextField(blank=True)
    detail_url = models.URLField(max_length=1000, blank=True)
    sender_id = models.CharField(max_length=200, blank=True)
    reply_to = models.CharField(max_length=200, blank=True)
    # The card's cancel button was pressed: the card shows "cancelled" from then on, whatever
    # in-flight progress the agent still reports, until the agent ends the run.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    @property
    def shown_status(self) -> str:
        return self.Status.CANCELLED if self.cancel_requested_at else self.status

    @property
    def is_live(self) -> bool:
        """Forms may be mounted: running and not cancelled by the person."""
        return self.status == self.Status.RUNNING and self.cancel_requested_at is None

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["running", "completed", "failed", "cancelled", "recovering"]),
                name="progress_card_status_valid",
            )
        ]

    def __str__(self) -> str:
        return f"progress card {self.pk} ({self.shown_status})"
