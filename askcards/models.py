"""askcards domain model (SPEC §3). Fields, choices, constraints; behaviour lives in services."""
from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from . import crypto
from .db.indexes import OpenAsksIndex


def _public_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def new_ask_id() -> str:
    return _public_id("q")


def new_session_id() -> str:
    return _public_id("s")


def new_out_track_id() -> str:
    return _public_id("ask")


class EncryptedTextField(models.TextField):
    """Stored encrypted (Fernet, key derived from ASKCARDS_SECRET_KEY); Python side sees plaintext."""

    def from_db_value(self, value, expression, connection):
        if value in (None, ""):
            return value
        return crypto.decrypt(value)

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value in (None, ""):
            return value
        return crypto.encrypt(value)


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


class Ask(models.Model):
    class Status(models.TextChoices):
        RESERVED = "reserved"
        PENDING = "pending"
        ANSWERED = "answered"
        CANCELLED = "cancelled"
        EXPIRED = "expired"
        INVALIDATED = "invalidated"
        FAILED = "failed"

    class Reason(models.TextChoices):
        SUBMITTED = "submitted"
        EMPTY = "empty"
        COMPLETED = "completed"
        BY_RESPONDENT = "by_respondent"
        BY_AGENT = "by_agent"
        BY_OPERATOR = "by_operator"
        SESSION_CANCELLED = "session_cancelled"
        PAUSE_FAILED = "pause_failed"
        HOST_GONE = "host_gone"  # an agent host stopped waiting for its prompt (askcards.hosts)
        CALLER_GONE = "caller_gone"  # an MCP client left a blocking call and did not come back for it
        DECLINED = "declined"  # the person declined the host's form (host=ask): their answer, no answers
        DISMISSED = "dismissed"  # the person dismissed the host's form without choosing (host=ask)
        TIMEOUT = "timeout"
        SUPERSEDED_BY_QUESTION = "superseded_by_question"
        SUPERSEDED_BY_MESSAGE = "superseded_by_message"
        RESTART = "restart"
        DELIVERY_FAILED = "delivery_failed"
        NO_SURFACE = "no_surface"
        NOT_AVAILABLE = "not_available"

    class Target(models.TextChoices):
        NONE = "none"
        USER = "user"
        GROUP = "group"

    OPEN = (Status.RESERVED, Status.PENDING)
    REASONS = {
        Status.ANSWERED: (Reason.SUBMITTED, Reason.EMPTY, Reason.COMPLETED),
        Status.CANCELLED: (
            Reason.BY_RESPONDENT,
            Reason.BY_AGENT,
            Reason.BY_OPERATOR,
            Reason.SESSION_CANCELLED,
            Reason.PAUSE_FAILED,
            Reason.HOST_GONE,
            Reason.CALLER_GONE,
            Reason.DECLINED,
            Reason.DISMISSED,
        ),
        Status.EXPIRED: (Reason.TIMEOUT,),
        Status.INVALIDATED: (Reason.SUPERSEDED_BY_QUESTION, Reason.SUPERSEDED_BY_MESSAGE, Reason.RESTART),
        Status.FAILED: (Reason.DELIVERY_FAILED, Reason.NO_SURFACE, Reason.NOT_AVAILABLE),
    }

    id = models.CharField(primary_key=True, max_length=34, default=new_ask_id, editable=False)
    # No single-column indexes: ask_agent_created_idx and ask_session_status_created_idx lead with these
    # (every index is one more write on each answer's UPDATE).
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="asks", db_index=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="asks", db_index=False)
    # The session's platform when the ask was made (services.tool_call copies it): the admin's
    # platform filter reads it here, through its own index, instead of joining every session.
    platform = models.CharField(max_length=10, choices=Session.Platform.choices, blank=True)
    tool = models.CharField(max_length=64)
    call_id = models.CharField(max_length=200, null=True, blank=True)
    sender_id = models.CharField(max_length=200, blank=True)
    blocking = models.BooleanField(default=True)
    title = models.CharField(max_length=500, blank=True)
    description = models.TextField(blank=True)
    # Normalised tool input: questions (ask_user_questions / DingTalk DSL) or fields (DingTalk).
    questions = models.JSONField(null=True, blank=True)
    fields = models.JSONField(null=True, blank=True)
    target_type = models.CharField(max_length=5, choices=Target.choices, default=Target.NONE)
    target_id = models.CharField(max_length=256, blank=True)
    scope_key = models.CharField(max_length=800, blank=True)
    surfaces = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RESERVED)
    reason = models.CharField(max_length=24, choices=Reason.choices, blank=True)
    deadline = models.DateTimeField()
    # An ask someone waits on in person (an agent host's prompt, a blocking MCP call): its waiter
    # is alive until then (services.waiters). A waiter that left, or a process that died with its
    # waiters, lets it lapse; the worker then withdraws the ask (host_gone / caller_gone), so
    # nobody answers into a void. Null: the result is read later (REST, tasks, webhook, feed).
    waiter_until = models.DateTimeField(null=True, blank=True)
    # Set once terminal: answers (ask_user_questions) / responses (DingTalk), tool_result, message.
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    result_delivered_at = models.DateTimeField(null=True, blank=True)
    # Not stored: the surface whose answer (or decline) just ended this ask, set by the transition
    # on the row it closed, so the surfaces told after the commit can say where ("" when unknown).
    closed_on: str = ""
    answers_purged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    status__in=["reserved", "pending", "answered", "cancelled", "expired", "invalidated", "failed"]
                ),
                name="ask_status_valid",
            ),
            # Open asks have no reason and no close time; terminal asks have both.
            models.CheckConstraint(
                condition=(Q(status__in=["reserved", "pending"], reason="", closed_at__isnull=True))
                | (
                    Q(closed_at__isnull=False)
                    & (
                        Q(status="answered", reason__in=["submitted", "empty", "completed"])
                        | Q(
                            status="cancelled",
                            reason__in=["by_respondent", "by_agent", "by_operator", "session_cancelled", "pause_failed",
                                       "host_gone", "caller_gone", "declined", "dismissed"],
                        )
                        | Q(status="expired", reason="timeout")
                        | Q(
                            status="invalidated",
                            reason__in=["superseded_by_question", "superseded_by_message", "restart"],
                        )
                        | Q(status="failed", reason__in=["delivery_failed", "no_surface", "not_available"])
                    )
                ),
                name="ask_reason_matches_status",
            ),
            models.CheckConstraint(condition=Q(target_type__in=["none", "user", "group"]), name="ask_target_valid"),
            models.UniqueConstraint(
                fields=["agent", "call_id"], condition=Q(call_id__isnull=False), name="ask_agent_call_id_unique"
            ),
        ]
        indexes = [
            # Worker deadline sweep: open asks whose deadline has passed (on SQLite (status,
            # deadline) over every ask: OpenAsksIndex says why).
            OpenAsksIndex(fields=["deadline"], name="ask_open_deadline_idx",
                          condition=Q(status__in=["reserved", "pending"])),
            # Worker sweep: open host prompts whose waiter stopped refreshing.
            OpenAsksIndex(fields=["waiter_until"], name="ask_open_waiter_idx",
                          condition=Q(status__in=["reserved", "pending"], waiter_until__isnull=False)),
            # Session-scoped reads: a session's asks of a status in registration order (the card's
            # forms on every click and card push, recover, messages, supersede), in index order.
            # Without created_at and id, SQLite (no statistics) took ask_status_created_idx for
            # these (it spares part of the sort) and read every session's pending asks, twice a click.
            models.Index(fields=["session", "status", "created_at", "id"], name="ask_session_status_created_idx"),
            # Agent's ask list, newest first.
            models.Index(fields=["agent", "-created_at"], name="ask_agent_created_idx"),
            # Agent's ask list filtered by status (GET /asks?status=), newest first: the page's ids
            # from this index alone (an index-only scan, selectors.ask_page), whatever the status's share.
            models.Index(fields=["agent", "status", "-created_at", "-id"], name="ask_agent_status_created_idx"),
            # Admin list filtered by status, or by reason (the filter names its status too), newest first.
            models.Index(fields=["status", "-created_at"], name="ask_status_created_idx"),
            # Admin list filtered by platform, or by tool, newest first.
            models.Index(fields=["platform", "-created_at"], name="ask_platform_created_idx"),
            models.Index(fields=["tool", "-created_at"], name="ask_tool_created_idx"),
            # Retention purge: delivered results whose answers are still stored.
            models.Index(
                fields=["result_delivered_at"],
                name="ask_purge_idx",
                condition=Q(answers_purged_at__isnull=True, result_delivered_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN


class Respondent(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SUBMITTED = "submitted"
        EMPTY = "empty"
        CANCELLED = "cancelled"
        MISSING = "missing"

    # No index of its own: respondent_one_per_person leads with it.
    ask = models.ForeignKey(Ask, on_delete=models.CASCADE, related_name="respondents", db_index=False)
    respondent_id = models.CharField(max_length=256, help_text="As given (case kept)")
    # Case-folded id: matching is case-insensitive (DingTalk reference §2.4).
    respondent_key = models.CharField(max_length=256, editable=False)
    position = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    answers = models.JSONField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    surface = models.CharField(max_length=20, blank=True)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["ask", "respondent_key"], name="respondent_one_per_person"),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "submitted", "empty", "cancelled", "missing"]),
                name="respondent_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.respondent_id} ({self.status})"


class CardMessage(models.Model):
    """One platform message that shows an ask (DingTalk card) or a progress card (Feishu)."""

    platform = models.CharField(max_length=10, choices=Bot.Platform.choices)
    bot = models.ForeignKey(Bot, on_delete=models.PROTECT, related_name="card_messages")
    ask = models.ForeignKey(Ask, null=True, blank=True, on_delete=models.CASCADE, related_name="card_messages")
    progress_card = models.ForeignKey(
        ProgressCard, null=True, blank=True, on_delete=models.CASCADE, related_name="card_messages"
    )
    # DingTalk outTrackId (ask_<hex>) or Feishu message_id.
    message_id = models.CharField(max_length=200)
    open_space_id = models.CharField(max_length=300, blank=True)
    pushed = models.JSONField(null=True, blank=True, help_text="What was last pushed")
    version = models.PositiveIntegerField(default=0)
    synced_version = models.PositiveIntegerField(default=0)
    # Earliest next push: the per-message rate limit, a retry's backoff, or a worker's claim.
    next_sync_at = models.DateTimeField(null=True, blank=True)
    sync_attempts = models.PositiveIntegerField(default=0, help_text="Failed pushes in a row")
    last_error = models.TextField(blank=True)
    # A card-only ending that overrides what the ask's reason shows (DingTalk ``dispatch_failed``:
    # the answer was received but its result never reached the agent).
    card_reason = models.CharField(max_length=24, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # message_id is blank until the platform returns it (a Feishu card not yet sent).
            models.UniqueConstraint(
                fields=["platform", "message_id"], name="card_message_platform_id_unique", condition=~Q(message_id="")
            ),
        ]
        indexes = [
            # Worker card sync: messages whose desired version is ahead of what was pushed.
            models.Index(
                fields=["next_sync_at"], name="card_message_unsynced_idx", condition=Q(version__gt=models.F("synced_version"))
            ),
        ]

    def __str__(self) -> str:
        return f"{self.platform} card {self.message_id or '(not sent yet)'}"


class AskEvent(models.Model):
    """Append-only audit row: one per transition and one per rejected or ignored click."""

    class Kind(models.TextChoices):
        CREATED = "created"
        ACTIVATED = "activated"
        CLOSED = "closed"
        RESPONDED = "responded"
        IGNORED = "ignored"
        SHOWN = "shown"
        DELIVERED = "delivered"
        PURGED = "purged"

    # No index of its own: ask_event_ask_idx leads with it.
    ask = models.ForeignKey(Ask, on_delete=models.CASCADE, related_name="events", db_index=False)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    from_status = models.CharField(max_length=12, blank=True)
    to_status = models.CharField(max_length=12, blank=True)
    actor = models.CharField(max_length=300, help_text="respondent:<id>, agent:<name>, operator:<user>, system")
    surface = models.CharField(max_length=20, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["ask", "id"], name="ask_event_ask_idx"),
            # Admin audit list filtered by what happened, newest first.
            models.Index(fields=["kind", "-id"], name="ask_event_kind_idx"),
        ]

    def __str__(self) -> str:
        moved = self.from_status and self.from_status != self.to_status
        state = f"{self.from_status} → {self.to_status}" if moved else self.to_status
        return " ".join(part for part in (self.kind, state, "by", self.actor) if part)


class OutboxEvent(models.Model):
    """Something the agent must learn; readable from /events, pushed by webhook when configured."""

    class Type(models.TextChoices):
        ASK_CLOSED = "ask.closed"
        ASK_PROGRESS = "ask.progress"
        SESSION_CANCEL_REQUESTED = "session.cancel_requested"

    # No index of its own: outbox_agent_seq_unique leads with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="outbox", db_index=False)
    seq = models.BigIntegerField()
    type = models.CharField(max_length=40, choices=Type.choices)
    ask = models.ForeignKey(Ask, null=True, blank=True, on_delete=models.CASCADE, related_name="outbox_events")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="outbox_events")
    # Small snapshot (status, counts); the ask itself is rendered at read time so purges apply.
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivered_via = models.CharField(max_length=10, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["agent", "seq"]
        constraints = [models.UniqueConstraint(fields=["agent", "seq"], name="outbox_agent_seq_unique")]
        indexes = [
            # Worker webhook delivery: undelivered, not given up, due.
            models.Index(
                fields=["next_attempt_at"],
                name="outbox_due_idx",
                condition=Q(delivered_at__isnull=True, failed_at__isnull=True),
            ),
            # Admin outbox list: the events given up on (few), newest first.
            models.Index(
                fields=["-id"], name="outbox_given_up_idx", condition=Q(delivered_at__isnull=True, failed_at__isnull=False)
            ),
            # Admin outbox list filtered by type, newest first.
            models.Index(fields=["type", "-id"], name="outbox_type_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"

    @property
    def webhook_id(self) -> str:
        return f"evt_{self.agent_id}_{self.seq}"


class PanelPresence(models.Model):
    """One connected web panel socket. A user is present while a row of theirs is fresh; rows of a
    crashed process simply go stale (``TTL``), so presence is right across processes."""

    # A row is fresh while ``last_seen`` is within this; the panel's heartbeat refreshes it every
    # ``surfaces.web.HEARTBEAT_SECONDS``, so a connected socket's row stays fresh while its
    # process runs.
    TTL = timedelta(seconds=90)

    username = models.CharField(max_length=150)
    channel_name = models.CharField(max_length=200, unique=True)
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        # reachable(): is any fresh socket of this user connected?
        indexes = [models.Index(fields=["username", "last_seen"], name="panel_presence_user_idx")]

    def __str__(self) -> str:
        return f"panel of {self.username}"


class CallbackReceipt(models.Model):
    """A platform callback already handled (Feishu ``header.event_id``; a DingTalk HTTP callback's
    signature pair, ``signature:<sha256>``): a re-delivery or replay is refused.

    Rows older than a day are dropped by the worker (retention.CALLBACK_RECEIPT_TTL); platforms
    re-deliver within minutes and a DingTalk pair is acceptable for at most two hours.
    """

    platform = models.CharField(max_length=10, choices=Bot.Platform.choices)
    event_id = models.CharField(max_length=200)
    # No index of its own: pruning walks the table in id order (services.retention), and every
    # click inserts a row, so an index nothing reads would be written on each one.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["platform", "event_id"], name="callback_receipt_unique")]

    def __str__(self) -> str:
        return f"{self.platform} {self.event_id}"


class PrunedTally(models.Model):
    """How many rows retention deleted, by the labels ``/metrics`` counts them with
    (``services.retention.asks_prune``): the counters read from the database (asks created and
    closed, responses) then never go down when old asks are pruned, so Prometheus never sees a
    false counter reset. One row per metric and label set; a prune adds to it in the transaction
    that deletes the rows."""

    class Metric(models.TextChoices):
        ASKS = "asks"  # labels: tool|platform|status|reason
        RESPONSES = "responses"  # labels: tool|surface|status

    metric = models.CharField(max_length=12, choices=Metric.choices)
    labels = models.CharField(max_length=200, help_text="The label values, joined by '|'")
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["metric", "labels"], name="pruned_tally_unique")]

    def __str__(self) -> str:
        return f"{self.metric} {self.labels}: {self.count}"
