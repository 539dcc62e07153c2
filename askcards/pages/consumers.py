"""``/ws/panel/``: the web panel's socket (SPEC §6.3). Thin: auth → selectors / services."""
from __future__ import annotations

import asyncio
import functools
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.utils import await_many_dispatch

from askcards.http import jsonlimits
from askcards import selectors, services
from askcards.db import in_executor
from askcards.wake.hub import HUB, REREAD, unique_name
from askcards.models import Ask, Respondent
from askcards.surfaces import web
from askcards.tools import dingtalk_ask_user_question as dt

logger = logging.getLogger(__name__)

# A panel message is one answer, whose free text is at most tools.ANSWER_MAX_CHARS (20,000)
# characters: 60 KB of CJK, 120 KB if every character were sent as a \uXXXX escape, plus the
# labels and option values the page echoes. 256 KB fits the longest answer any surface accepts, so
# that answer's own bound is what a person meets (a clear ack), and bounds what one frame costs us.
MAX_MESSAGE_BYTES = 256 * 1024
# Pushes a socket has not handled yet; past it the oldest are dropped (its heartbeat catches up).
INBOX_LIMIT = 1000


# The panel sockets' own database threads: not Channels' ``database_sync_to_async``, which is
# thread-sensitive (daphne gives consumers no context of their own), so every socket of a process
# ran its reads and answers on ONE thread, one after another — with many sockets a process,
# wakes queued behind each other (bench_scaleout). Apart from the request pool,
# so a thousand sockets' heartbeats never queue ahead of long-polls and MCP calls, nor those ahead
# of an answer. With the default pool's min(32, cores + 4) threads and the one thread Channels'
# auth uses at connect, that is ASKCARDS_DB_POOL_MAX (10) connections on 2 cores.
PANEL_THREADS = 3
_panel_threads = ThreadPoolExecutor(max_workers=PANEL_THREADS, thread_name_prefix="panel")


def pooled(fn):
    """``fn`` run on the panel sockets' database threads (``askcards.db.in_executor``)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return in_executor(_panel_threads, fn, *args, **kwargs)

    return call


@pooled
def _show(username: str, ask_id: str) -> dict | None:
    """What the panel shows of an ask that was just activated or progressed, re-read (it may
    have closed meanwhile); None when there is nothing to show this user."""
    ask = selectors.panel_ask(username=username, ask_id=ask_id)
    if ask is None or ask.status != Ask.Status.PENDING or not selectors.panel_answerable(ask):
        return None
    row = selectors.panel_respondent(ask) if ask.tool == dt.NAME else None
    if row is not None and row.status != Respondent.Status.PENDING:
        return web.responded_message(ask, row)
    return web.ask_message(ask)


@pooled
def _history_add(username: str, ask_id: str) -> dict | None:
    ask = selectors.panel_ask(username=username, ask_id=ask_id)
    return None if ask is None else web.history_add(ask)


@pooled
def _answer(username: str, ask_id: str, answers) -> services.AnswerOutcome | None:
    """Answer one of this user's question asks; None when it is not theirs (or does not exist),
    refused as invalid when it is a DingTalk form (answered by ``dingtalk_form_result``)."""
    ask = selectors.panel_ask(username=username, ask_id=ask_id)
    if ask is None:
        return None
    if ask.tool == dt.NAME:
        return services.AnswerOutcome(False, ask, services.AnswerRefusal.INVALID,
                                      "this ask is a DingTalk form; answer it with dingtalk_form_result")
    return services.ask_answer(ask_id=ask_id, ask=ask, answers=answers, surface="web")


@pooled
def _answer_form(username: str, ask_id: str, action, form) -> services.PanelAnswer:
    return services.dingtalk_panel_answer(username=username, ask_id=ask_id, action=action, form=form)


class PanelBeat:
    """The heartbeat of every panel socket of this process: one task, one ``panels_catch_up`` every
    ``HEARTBEAT_SECONDS`` for all of them, and ``PUSH_GRACE_SECONDS`` later a second look at the
    sockets that differed from the database (``PanelView.suspects``). One beat per socket was a
    presence write and two reads per socket every 30 s: round trips that grew with the sockets of a
    process, and that pushes queued behind (bench_scaleout).

    The task runs while sockets are joined, on their event loop. A server has one loop; tests run
    one each, and a socket a test left open belongs to a loop that is gone: a join on another
    loop starts afresh."""

    def __init__(self) -> None:
        self.sockets: dict[str, PanelConsumer] = {}  # channel name → its consumer
        self.task: asyncio.Task | None = None
        self.rereading: asyncio.Task | None = None

    def join(self, consumer: PanelConsumer) -> None:
        if self.task is not None and self.task.get_loop() is not asyncio.get_running_loop():
            self.sockets, self.task, self.rereading = {}, None, None
        self.sockets[consumer.channel_name] = consumer
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def leave(self, consumer: PanelConsumer) -> None:
        self.sockets.pop(consumer.channel_name, None)
        if not self.sockets:
            for task in (self.task, self.rereading):
                if task is not None:
                    task.cancel()
            self.task = self.rereading = None

    def reread(self) -> None:
        """The bus was lost or is back (``REREAD``: the hub hands one to every socket): the
        sockets of this process catch up once now, not at the next beat up to
        ``HEARTBEAT_SECONDS`` away, as the parked long-polls and MCP calls re-read at once."""
        if self.sockets and (self.rereading is None or self.rereading.done()):
            self.rereading = asyncio.ensure_future(self._catch_up(presence=False))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(web.HEARTBEAT_SECONDS)
            await self._catch_up(presence=True)

    async def _catch_up(self, *, presence: bool) -> None:
        await self.beat(list(self.sockets.values()), presence=presence)
        # What differed is looked at again once a push under way has had time to arrive.
        suspected = [c for c in self.sockets.values() if c.view.suspects]
        if suspected:
            await asyncio.sleep(web.PUSH_GRACE_SECONDS)
            await self.beat([c for c in suspected if self.sockets.get(c.channel_name) is c], presence=False)

    async def beat(self, consumers: list[PanelConsumer], *, presence: bool) -> None:
        if not consumers:
            return
        before = [web.PanelSocket(c.username, c.channel_name, c.view.copy()) for c in consumers]
        try:
            found = await pooled(web.panels_catch_up)(before, presence=presence)
        except Exception:  # the database is away: the next beat tries again
            logger.warning("heartbeat of %d panel socket(s) failed; retrying in %s s", len(before),
                           web.HEARTBEAT_SECONDS, exc_info=True)
            return
        for consumer, socket, catch_up in zip(consumers, before, found):
            if self.sockets.get(consumer.channel_name) is not consumer:
                continue  # it disconnected meanwhile
            try:
                for message in consumer.view.caught_up(socket.view, catch_up):
                    await consumer.send_json(message)
                await consumer.fill()
            except Exception:  # one socket's failure is not the others'
                logger.warning("panel catch-up of %s could not be sent", consumer.username, exc_info=True)


panel_beat = PanelBeat()


class PanelConsumer(AsyncJsonWebsocketConsumer):
    """One panel socket. Its interest is an entry in the process's hub under its user's key
    (``askcards.wake.hub``), not a channel: the hub hands it pushes (``deliver``) into its inbox, and
    they are handled one at a time with the socket's own frames, in order."""

    async def __call__(self, scope, receive, send):
        # Channels' loop over the client's messages, with the inbox in place of a channel layer.
        self.scope, self.channel_layer, self.base_send = scope, None, send
        self.loop = asyncio.get_running_loop()
        self.channel_name = unique_name("panel")  # names its presence row
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=INBOX_LIMIT)
        try:
            await await_many_dispatch([receive, self.inbox.get], self.dispatch)
        except StopConsumer:
            pass
        finally:  # also when the server cancels the socket, which then never disconnects
            if hasattr(self, "key"):
                panel_beat.leave(self)
                HUB.unregister(self.key, self)

    def deliver(self, message: dict[str, Any]) -> None:
        """A push from the hub. A ``REREAD`` (the bus was lost or is back) has every socket of
        the process catch up at once (``PanelBeat.reread``); past the inbox's bound the oldest push
        is dropped, and the heartbeat catches up."""
        if message.get("type") == REREAD:
            panel_beat.reread()
            return
        if self.inbox.full():  # the oldest goes: the newest push is the one most likely still true
            self.inbox.get_nowait()
            logger.info("panel socket of %s is %d pushes behind; dropped the oldest", self.username, INBOX_LIMIT)
        self.inbox.put_nowait(message)

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.username = user.get_username()
        self.key = web.panel_key(self.username)
        self.view = web.PanelView()  # what this socket was sent, for the heartbeat's catch-up
        await HUB.register(self.key, self)
        await pooled(web.presence_touch)(username=self.username, channel_name=self.channel_name)
        await self.accept()
        known = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("known", [""])[0].split(",")
        snapshot = await pooled(web.panel_snapshot)(self.username, [k for k in known if k])
        self.view.shows(snapshot.shown)
        self.view.counts(snapshot.more)
        for message in snapshot.messages:
            await self.send_json(message)
        panel_beat.join(self)

    async def disconnect(self, code):
        if not hasattr(self, "username"):
            return
        panel_beat.leave(self)
        HUB.unregister(self.key, self)
        await pooled(web.presence_drop)(channel_name=self.channel_name)

    @classmethod
    async def encode_json(cls, content):
        # UTF-8 as it is: a CJK character is 3 bytes on the wire, not a 6-byte \uXXXX escape.
        return json.dumps(content, ensure_ascii=False)

    async def send_json(self, content, close=False):
        if hasattr(self, "view"):
            self.view.sent(content)
        await super().send_json(content, close)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """Every frame is parsed by ``jsonlimits.load``; what it refuses gets an error message and
        the socket stays open (Channels' own decoding raises, which closes it)."""
        try:
            content = jsonlimits.load(text_data if text_data is not None else bytes_data or b"",
                                      what="message", max_bytes=MAX_MESSAGE_BYTES, text=False)
        except jsonlimits.JSONRefused as exc:
            await self.send_json({"type": "error", "error": str(exc)})
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type") if isinstance(content, dict) else None
        if kind not in ("ask_user_questions_result", "dingtalk_form_result"):
            await self.send_json({"type": "error", "error": "expected {\"type\": \"ask_user_questions_result\" or "
                                                            "\"dingtalk_form_result\", …}"})
            return
        ack = "ask_user_questions_ack" if kind == "ask_user_questions_result" else "dingtalk_form_ack"
        request_id = content.get("requestId")
        if not isinstance(request_id, str):
            await self.send_json({"type": ack, "requestId": request_id, "ok": False, "error": "requestId must be a string"})
            return
        try:
            # After requestId, so the refusal is an ack the panel can match to its form.
            jsonlimits.check_text(content, "message")
        except jsonlimits.JSONRefused as exc:
            error = web.refusal_error(services.AnswerRefusal.INVALID, str(exc))
            await self.send_json({"type": ack, "requestId": request_id, "ok": False, "error": error})
            return
        if kind == "dingtalk_form_result":
            await self._receive_form(request_id, content)
            return
        outcome = await _answer(self.username, request_id, content.get("answers"))
        if outcome is None:
            # Not this user's ask (or no such ask): same answer either way, nothing changes.
            error = web.refusal_error(services.PanelRefusal.NOT_FOUND)
            await self.send_json({"type": ack, "requestId": request_id, "ok": False, "error": error})
            return
        reply = {"type": ack, "requestId": request_id, "ok": outcome.accepted}
        if outcome.reason is not None:
            reply["error"] = web.refusal_error(outcome.reason, outcome.detail)
        await self.send_json(reply)

    async def _receive_form(self, request_id: str, content: dict) -> None:
        """``{"type": "dingtalk_form_result", "requestId", "action": "submit" | "cancel", "form":
        {field name: value}}`` (the card's value shapes) → ``dingtalk_form_ack`` ``{requestId, ok,
        [error, field], [status, surface, answers]}`` (the panel user's response as recorded)."""
        outcome = await _answer_form(self.username, request_id, content.get("action", "submit"), content.get("form"))
        reply = {"type": "dingtalk_form_ack", "requestId": request_id, "ok": outcome.ok}
        if outcome.reason is not None:
            reply["error"] = web.refusal_error(outcome.reason, outcome.detail)
            if outcome.field:
                reply["field"] = outcome.field
        if outcome.respondent is not None and outcome.ask is not None:
            reply.update(web.respondent_state(outcome.ask, outcome.respondent))
        await self.send_json(reply)
        await self.fill()

    async def fill(self) -> None:
        """The next asks waiting beyond the page, for the room it has again (an ask on it ended or
        was responded to), and the count of the rest."""
        if self.view.more and self.view.room() > 0:
            messages, gone = await pooled(web.panel_fill)(self.username, set(self.view.more), self.view.room())
            self.view.forgets(gone)
            for message in messages:
                await self.send_json(message)
        for message in self.view.news():
            await self.send_json(message)

    # Push handlers (``dispatch`` by type). The key is this user's own, so its messages are theirs to see.
    async def panel_show(self, event):
        message = await _show(self.username, event["ask_id"])
        if message is None:
            return
        ask_id = message["requestId"]
        if message["type"] in web.PanelView.OPENING and ask_id not in self.view.open and self.view.room() <= 0:
            self.view.counts({ask_id})  # the page is full: counted, shown when there is room
        elif message["type"] == "dingtalk_form_responded" and ask_id in self.view.more:
            self.view.forgets({ask_id})  # responded on the card before the page showed it
        else:
            await self.send_json(message)
        await self.fill()

    async def panel_delivered(self, event):
        """The agent took the result of an ask this user answered: the page may now say so."""
        await self.send_json({"type": "ask_user_questions_delivered", "requestId": event["ask_id"]})

    async def panel_withdraw(self, event):
        ask_id = event.get("ask_id")
        if ask_id in self.view.more:
            self.view.forgets({ask_id})  # it ended before the page showed it
        else:
            await self.send_json(event["message"])
        if ask_id is not None:
            item = event["history"] if "history" in event else await _history_add(self.username, ask_id)
            if item is not None:
                await self.send_json(item)
        await self.fill()
