"""What the service keeps besides asks: agent events (the outbox), panel presence, callback
receipts, pruned tallies."""
from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .agents import Agent, Bot
from .sessions import Session
from .asks import Ask


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
