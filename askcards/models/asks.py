"""Asks and what hangs off them: respondents, the card messages that show them, their audit."""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..db.indexes import OpenAsksIndex
from .fields import new_ask_id
from .agents import Agent, Bot
from .sessions import ProgressCard, Session


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
        # The agent host's prompt was settled in its own terminal: its tool ran, or its turn ended.
        HOST_HANDLED = "host_handled"
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
            Reason.HOST_HANDLED,
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
    # The surface whose answer (or decline) ended this ask ("" when none did: a deadline, an agent,
    # the system), so every surface can say where it was answered — the Feishu card long after.
    closed_on = models.CharField(max_length=20, blank=True)
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
                                       "host_gone", "host_handled", "caller_gone", "declined",
                                       "dismissed"],
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
            # The Feishu card's note on forms answered where the card cannot show it (the MCP
            # client's own dialog, an MCP App): few rows, read on every render of a session's card.
            # No status in the condition: the read names none (db.statements.card_asks says why).
            models.Index(fields=["session", "-closed_at"], name="ask_answered_on_host_idx",
                         condition=Q(closed_on__in=["host", "host_app"])),
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
