"""``/ws/panel/``: the web panel's socket (SPEC §6.3). Thin: auth → selectors / services."""
from __future__ import annotations

import asyncio
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from askcards import services
from askcards.models import Ask
from askcards.surfaces import web

logger = logging.getLogger(__name__)




@database_sync_to_async
def _ask_for(username: str, ask_id: str) -> Ask | None:
    return Ask.objects.select_related("session").filter(pk=ask_id, session__web_user=username).first()


@database_sync_to_async
def _answer(username: str, ask_id: str, answers) -> services.AnswerOutcome | None:
    """Answer one of this user's asks; None when it is not theirs (or does not exist)."""
    ask = Ask.objects.select_related("session").filter(pk=ask_id, session__web_user=username).first()
    if ask is None:
        return None
    return services.ask_answer(ask_id=ask_id, ask=ask, answers=answers, surface="web")


class PanelConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.username = user.get_username()
        self.group = web.panel_group(self.username)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await database_sync_to_async(web.presence_touch)(username=self.username, channel_name=self.channel_name)
        await self.accept()
        known = parse_qs(self.scope.get("query_string", b"").decode("latin-1")).get("known", [""])[0].split(",")
        for message in await database_sync_to_async(web.panel_snapshot)(self.username, [k for k in known if k]):
            await self.send_json(message)
        self.heartbeat = asyncio.ensure_future(self._heartbeat())

    async def disconnect(self, code):
        if not hasattr(self, "username"):
            return
        if hasattr(self, "heartbeat"):
            self.heartbeat.cancel()
        await self.channel_layer.group_discard(self.group, self.channel_name)
        await database_sync_to_async(web.presence_drop)(channel_name=self.channel_name)

    async def _heartbeat(self):
        while True:
            await asyncio.sleep(web.HEARTBEAT_SECONDS)
            await database_sync_to_async(web.presence_touch)(username=self.username, channel_name=self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # The JSON consumer raises on a frame without text (a binary or an empty one), which would
        # drop the socket with 1011: the page gets the same error as for any unreadable frame.
        if not text_data:
            await self.send_json({"type": "error", "error": "expected a JSON text frame"})
            return
        await super().receive(text_data=text_data, **kwargs)

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict) or content.get("type") != "ask_user_questions_result":
            await self.send_json({"type": "error", "error": "expected {\"type\": \"ask_user_questions_result\", …}"})
            return
        request_id = content.get("requestId")
        if not isinstance(request_id, str):
            await self.send_json({"type": "ask_user_questions_ack", "requestId": request_id, "ok": False, "error": "requestId must be a string"})
            return
        outcome = await _answer(self.username, request_id, content.get("answers"))
        if outcome is None:
            # Not this user's ask (or no such ask): same answer either way, nothing changes.
            await self.send_json({"type": "ask_user_questions_ack", "requestId": request_id, "ok": False, "error": "not_found"})
            return
        reply = {"type": "ask_user_questions_ack", "requestId": request_id, "ok": outcome.accepted}
        if not outcome.accepted:
            reply["error"] = outcome.error
        await self.send_json(reply)

    async def decode_json(self, text_data):
        try:
            return await super().decode_json(text_data)
        except ValueError:
            return None

    # Channel-layer handlers. The group is this user's own, so its messages are theirs to see.
    async def panel_show(self, event):
        ask = await _ask_for(self.username, event["ask_id"])  # re-read: it may have closed meanwhile
        if ask is not None and ask.status == Ask.Status.PENDING:
            await self.send_json(web.ask_message(ask))

    async def panel_withdraw(self, event):
        await self.send_json(event["message"])
