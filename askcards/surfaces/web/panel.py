"""One socket's view of the panel and how it catches up with the database: the snapshot a
(re)connecting socket is sent, the page's fill, the heartbeat's comparison."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from askcards import selectors
from askcards.models import Ask
from askcards.tools import dingtalk_ask_user_question as dt

from .messages import (ask_message, cancelled_message, history_add, history_item, more_message, page_size,
                       responded_message)
from .presence import presence_refresh

logger = logging.getLogger(__name__)

MAX_KNOWN = 50  # asks a reconnecting panel may ask about (it lists those it still shows as open)
# A person with hundreds of waiting asks gets a page of them (``ASKCARDS_PANEL_PAGE``, 20), oldest
# first, and a count of the rest (``pending_more``); each ask that leaves the page lets the next one
# in. A connect sends at most PANEL_PAGE_BYTES of asks (the page's own asks beyond it wait for the
# next fill), so a reconnect costs a page, not megabytes.
PANEL_PAGE_BYTES = 256 * 1024
PANEL_FILL_SLACK = 10  # rows a fill reads beyond its room (asks that no longer wait are skipped)

class PanelView:
    """What one connected panel socket was sent, as far as catching up needs it: the asks it shows
    as open (a DingTalk collection it responded to included, until it ends) and the pending asks
    it has judged (shown, or not for this user).

    Pushes are hints: the bus loses what is published while Redis is away or a process is
    subscribing again, and a socket's inbox drops what comes past its bound. So every heartbeat
    compares this view with the database (``panels_catch_up``) and sends what the socket lacks: a
    dropped push costs at most one heartbeat's delay (and the grace below), never a question the
    person cannot see.

    ``suspects``: how the socket differed from the database at the last comparison. A difference
    is acted on only once it is seen twice, ``PUSH_GRACE_SECONDS`` apart at least: the push of an
    ask made a moment before a beat is usually still under way, and reading it for every socket
    of a busy deployment at every beat would cost more than the pushes themselves.

    ``more``: the asks waiting for the user beyond the page (``page_size``), judged but not sent:
    the socket was told how many (``pending_more``) and gets the next of them as the page empties
    (``room``). ``responded``: DingTalk collections on the page the user already responded to —
    shown, still open, no longer taking room."""

    OPENING = ("ask_user_questions", "dingtalk_form")

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.judged: set[str] = set()
        self.suspects: set[str] = set()
        self.more: set[str] = set()
        self.responded: set[str] = set()
        self.told = 0  # the count of ``more`` the socket was last told

    def copy(self) -> PanelView:
        view = PanelView()
        for name in ("open", "judged", "suspects", "more", "responded"):
            setattr(view, name, set(getattr(self, name)))
        view.told = self.told
        return view

    def room(self) -> int:
        """How many more asks the page takes."""
        return page_size() - len(self.open - self.responded)

    def shows(self, ask_ids: set[str]) -> None:
        """Note asks the socket already shows (a reconnecting page's own), not sent again."""
        self.open |= ask_ids
        self.judged |= ask_ids

    def counts(self, ask_ids: set[str]) -> None:
        """Note asks waiting beyond the page."""
        self.more |= ask_ids - self.open
        self.judged |= ask_ids

    def forgets(self, ask_ids: set[str]) -> None:
        """Forget asks of ``more`` that no longer wait for the user."""
        self.more -= ask_ids

    def news(self) -> list[dict[str, Any]]:
        """``pending_more`` when the count the socket was told is no longer right."""
        return [more_message(len(self.more))] if len(self.more) != self.told else []

    def sent(self, message: dict[str, Any]) -> None:
        """Note a message as it goes to the socket."""
        kind, ask_id = message.get("type"), message.get("requestId")
        if kind == "pending_more":
            self.told = message["count"]
            return
        if not isinstance(ask_id, str):
            return
        if kind in self.OPENING or kind == "dingtalk_form_responded":
            self.open.add(ask_id)
            self.judged.add(ask_id)
            self.more.discard(ask_id)
            if kind == "dingtalk_form_responded":
                self.responded.add(ask_id)
        elif kind == "dingtalk_form_ack" and message.get("ok") and ask_id in self.open:
            self.responded.add(ask_id)
        elif kind == "ask_user_questions_cancelled":
            self.open.discard(ask_id)
            self.responded.discard(ask_id)

    def caught_up(self, before: PanelView, found: CatchUp) -> list[dict[str, Any]]:
        """Take in a catch-up computed from ``before`` (this view as it started); returns its
        messages that are still news (a push may have brought them meanwhile)."""
        self.judged = (self.judged - (before.judged - found.pending)) | (found.pending - found.suspects)
        self.open -= found.hidden
        self.more -= found.hidden | found.gone
        self.counts(found.more)
        self.suspects = found.suspects
        news = []
        for message in found.messages:
            kind, ask_id = message.get("type"), message.get("requestId")
            if kind in self.OPENING and ask_id in self.open:
                continue
            if kind == "ask_user_questions_cancelled" and ask_id not in self.open:
                continue
            news.append(message)
        return news + self.news()


@dataclass
class CatchUp:
    pending: set[str]  # every pending ask of the user's panel (judged now, but those still suspected)
    messages: list[dict[str, Any]]  # what the socket lacked
    hidden: set[str]  # asks it showed that the user may no longer see (grant revoked): forgotten
    suspects: set[str]  # differences seen for the first time: acted on at the next comparison
    more: set[str] = field(default_factory=set)  # asks it lacks that wait beyond its page: counted
    gone: set[str] = field(default_factory=set)  # asks it counted that no longer wait: forgotten


@dataclass
class PanelSocket:
    """One connected panel socket as the heartbeat sees it: whose, its channel, what it was sent."""
    username: str
    channel_name: str
    view: PanelView


def panels_catch_up(sockets: list[PanelSocket], *, presence: bool = True) -> list[CatchUp]:
    """The heartbeat of all of a process's panel sockets (one per ``HEARTBEAT_SECONDS``, not one per
    socket): their presence refreshed (unless ``presence`` is False), then what each socket lacks
    compared with the database — asks waiting for its user it was never sent, and how asks it shows
    as open ended — among the differences it already showed the last time (``PanelView.suspects``).

    When nothing was missed that is two statements per ``PANEL_BEAT_CHUNK`` sockets (the presence
    UPDATE) and two per chunk of users (their sessions, their pending ask ids), compared socket by
    socket here; the asks themselves are read only for a user whose sockets lack something, once for
    all of them. Returns one ``CatchUp`` per socket, in order."""
    if presence:
        presence_refresh({socket.channel_name: socket.username for socket in sockets})
    pending = selectors.panel_pending_ids(socket.username for socket in sockets)
    found, acts = [], []
    wanted: dict[str, set[str]] = {}
    for socket in sockets:
        mine = pending.get(socket.username, set())
        differ = (mine - socket.view.judged) | (socket.view.open - mine)
        act = differ & socket.view.suspects
        # What it counted beyond its page and is no longer pending needs no reading: forgotten.
        found.append(CatchUp(mine, [], set(), differ - act, gone=socket.view.more - mine))
        acts.append(act)
        if act:
            wanted.setdefault(socket.username, set()).update(act)
    rows = {username: {ask.id: ask for ask in selectors.panel_asks_by_id(username=username, ask_ids=sorted(ids))}
            for username, ids in wanted.items()}
    for socket, catch_up, act in zip(sockets, found, acts):
        if act:
            _catch_up_socket(socket.view, catch_up, act, rows[socket.username])
            if catch_up.messages:
                logger.info("panel of %s caught up %d message(s) its pushes did not bring",
                            socket.username, len(catch_up.messages))
    return found


def _catch_up_socket(view: PanelView, found: CatchUp, act: set[str], rows: dict[str, Ask]) -> None:
    """``found``'s messages and hidden asks for one socket's ``view``: of the asks it lacks or shows
    wrongly (``act``), those its user may see are in ``rows`` (read by the panel's queries, oldest
    first), those not there are hidden. Asks it lacks go on its page while there is room, and are
    counted beyond it."""
    ended = view.open - found.pending
    found.hidden = {ask_id for ask_id in act & ended if ask_id not in rows}
    room = page_size() - len(view.open - view.responded - ended)
    for ask in rows.values():
        if ask.id not in act:
            continue
        if ask.id in ended:
            if not ask.is_open:
                found.messages.append(cancelled_message(ask))
                if (item := history_add(ask)) is not None:
                    found.messages.append(item)
        elif ask.id in view.more:
            if not selectors.panel_waiting(ask):
                found.gone.add(ask.id)
        elif selectors.panel_waiting(ask):
            if room > 0:
                found.messages.append(ask_message(ask))
                room -= 1
            else:
                found.more.add(ask.id)


@dataclass
class Snapshot:
    """What a (re)connecting panel socket is sent, and what its view starts from."""
    messages: list[dict[str, Any]]
    shown: set[str]  # asks the page still shows (``known``) that still wait: not sent again
    more: set[str]  # asks waiting for the user beyond the page: counted, sent as the page empties


def panel_snapshot(username: str, known: list[str]) -> Snapshot:
    """What a (re)connecting panel is sent: the user's recent history, then a page of the asks
    waiting for their answer, oldest first — those it still shows (``known``) count towards the
    page but are not sent again, the others stop at ``page_size()`` asks or ``PANEL_PAGE_BYTES`` —
    then how many more wait (``pending_more``, when any), then how each ask it still shows as open
    ended or was responded to while it was away."""
    pending = selectors.panel_pending(username)
    history = [history_item(ask) for ask in selectors.panel_history(username)]
    messages: list[dict[str, Any]] = [{"type": "history", "asks": history}]
    known = known[:MAX_KNOWN]
    shown = {ask.id for ask in pending if ask.id in known}
    more: set[str] = set()
    budget, page = PANEL_PAGE_BYTES, len(shown)
    for ask in pending:
        if ask.id in shown:
            continue
        message = ask_message(ask)
        size = len(json.dumps(message, ensure_ascii=False).encode())
        if page >= page_size() or (page and size > budget):
            more.add(ask.id)
            continue
        messages.append(message)
        budget, page = budget - size, page + 1
    if more:
        messages.append(more_message(len(more)))
    waiting = {ask.id for ask in pending}
    away = [k for k in known if k not in waiting]
    for ask in selectors.panel_asks_by_id(username=username, ask_ids=away) if away else []:
        if not ask.is_open:
            messages.append(cancelled_message(ask))
        elif ask.tool == dt.NAME and (row := selectors.panel_respondent(ask)) is not None:
            messages.append(responded_message(ask, row))
    return Snapshot(messages, shown, more)


def panel_fill(username: str, more: set[str], room: int) -> tuple[list[dict[str, Any]], set[str]]:
    """The next asks of ``more`` (waiting beyond a socket's page) for the ``room`` its page has
    again, oldest first: their messages, and the asks of ``more`` that no longer wait (ended,
    responded, no longer this user's), to forget. Reads a few rows more than the room, not all of
    ``more``."""
    messages: list[dict[str, Any]] = []
    gone: set[str] = set()
    left = set(more)
    while room > 0 and left:
        limit = room + PANEL_FILL_SLACK
        rows = selectors.panel_next(username=username, ask_ids=sorted(left), limit=limit)
        left -= {ask.id for ask in rows}
        for ask in rows:
            if not selectors.panel_waiting(ask):
                gone.add(ask.id)
            elif room > 0:
                messages.append(ask_message(ask))
                room -= 1
        if len(rows) < limit:  # the rest of ``more`` no longer waits on this user's panel
            gone |= left
            break
    return messages, gone
