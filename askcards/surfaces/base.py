"""The seam every place that shows an ask plugs into (web panel, Feishu card, DingTalk card).

A surface subclasses ``Surface`` and overrides the hooks it needs; every other hook is a no-op, so
the lifecycle core calls each hook on every surface without asking whether it has one.
Surfaces are listed in ``settings.ASKCARDS_SURFACES`` (dotted paths), in the order they are tried.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from askcards.models import Ask, Bot, Session


# What a card or a list shows of a person's long answer is cut to fit and ends with this mark; the
# answer itself is recorded whole, and the agent gets it whole. The mark says "recorded", not
# "delivered": a card or panel never claims delivery before the agent took the result.
SHORTENED_MARK = "…（已截断，完整回答已记录）"


def shortened(text: str, *, max_bytes: int | None = None, max_chars: int | None = None,
              mark: str = SHORTENED_MARK) -> str:
    """``text`` when it is within ``max_chars`` characters and ``max_bytes`` bytes of UTF-8 (each
    when given); else its beginning and ``mark``, together within both."""
    size = len(text.encode("utf-8", "surrogatepass")) if max_bytes is not None else 0
    if (max_chars is None or len(text) <= max_chars) and (max_bytes is None or size <= max_bytes):
        return text
    head = text if max_chars is None else text[:max(max_chars - len(mark), 0)]
    if max_bytes is not None:
        room = max(max_bytes - len(mark.encode("utf-8")), 0)
        head = head.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")  # no half character
    return head + mark


class DeliveryFailed(Exception):
    """A surface could not put the ask in front of the person."""


@dataclass
class SyncReport:
    """What a card-sync pass found that the lifecycle must act on: surfaces report, the worker
    turns the report into service calls (a surface never calls a service).

    ``unsent_progress_cards``: (progress card id, error) of cards whose first send failed for good;
    the asks shown nowhere else fail with ``delivery_failed``."""

    unsent_progress_cards: list[tuple[int, str]] = field(default_factory=list)


class PlatformClient(Protocol):
    """What every platform's client does, whatever else it does: get an access token."""

    def fetch_token(self) -> str: ...


class Surface:
    """One place an ask can be shown. ``name`` is stored in ``Ask.surfaces`` and in audit rows.

    ``show``, ``withdraw`` and ``result_undeliverable`` run after a commit and must not raise: a
    surface that fails logs and leaves retries to the worker's card sync (``sync_due``)."""

    name: str
    platform = ""  # the Bot.Platform whose bots carry this surface's cards ("" for none)

    def client(self, bot: Bot, *, timeout: float, max_attempts: int, backoff: float) -> PlatformClient:
        """A new client of the platform for ``bot`` (no connection or token reused), for a surface
        with a ``platform``."""
        raise NotImplementedError(f"surface {self.name} has no platform client")

    def reachable(self, session: Session, tool: str) -> bool:
        """Can this surface show this tool's ask to this session's person now? Decides
        ``no_surface``; must be correct across processes (read the database or Redis)."""
        return False

    def accompanies(self, session: Session, tool: str) -> bool:
        """Does this surface also show this tool's ask whenever another surface reaches the person
        (never alone: it does not decide ``no_surface``)?"""
        return False

    def deliver(self, ask: Ask) -> None:
        """After the ask is reserved and committed, outside any transaction and before activation:
        for platforms that must create a message synchronously (DingTalk ``createAndDeliver``).
        Raises ``DeliveryFailed`` to fail the ask with ``delivery_failed``."""

    def mark(self, ask: Ask) -> None:
        """Inside the transition's transaction (activation and every terminal transition): record
        that a platform message must be re-rendered (bump ``CardMessage.version``), so the mark
        commits with the change it is about — no re-render is lost to a crash between commit and
        an after-commit hook, and no extra write transaction is needed."""

    def show(self, ask: Ask) -> None:
        """After the activation commits: push to panels, schedule a card render."""

    def withdraw(self, ask: Ask) -> None:
        """After a terminal transition commits: tell every place still showing the ask."""

    def result_delivered(self, ask: Ask) -> None:
        """The ask's result reached its agent (a waiter, a task read, the events feed, a webhook):
        where the person was told only that their answer was submitted, say it was delivered."""

    def result_undeliverable(self, ask: Ask) -> None:
        """The ask's result could never be delivered to its agent: say so where the ask is shown."""

    def sync_due(self, now: datetime, report: SyncReport) -> int:
        """A worker step: push what changed to platform messages whose desired version is ahead of
        what was pushed (``CardMessage.version > synced_version``), retrying what failed. Returns
        how much work it did; what the lifecycle must act on goes into ``report``."""
        return 0
