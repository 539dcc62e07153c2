"""Long-polls that hold no thread and no database connection while they wait.

The DRF view does the real work (auth, validation, the first read) in a pooled thread and, when
the answer is "not yet", attaches a ``LongPoll`` to its response. The ASGI app below then parks the
request on the channel layer (one channel subscribed to the view's groups), re-runs the view's
``again`` in a pooled thread when woken or timed out, and sends that response.

Served by ``project.asgi`` ahead of Django's handler: Django's ASGI handler gives every request a
dedicated thread for its sync parts, which would mean one idle thread per waiter. Under a plain
WSGI server the same views answer at once with the current state (no waiting).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Callable

from channels.layers import get_channel_layer
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from askcards.db import in_pool

logger = logging.getLogger(__name__)


@dataclass
class LongPoll:
    groups: list[str]
    timeout: float
    # again(final) -> the response body (JSON data), or None while still waiting (final=False only).
    again: Callable[[bool], Any]


def _in_pool(fn, *args, **kwargs):
    """Run a view call in the shared thread pool (``askcards.db.in_pool``), rendered there too."""

    def call():
        response = fn(*args, **kwargs)
        if response is not None and hasattr(response, "render") and not getattr(response, "is_rendered", True):
            response.render()
        return response

    return in_pool(call)


class LongPollApp:
    """ASGI app serving one DRF view whose responses may carry a ``long_poll``."""

    def __init__(self, view: Callable):
        self.view = view

    async def __call__(self, scope, receive, send):
        body = BytesIO()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.write(message.get("body", b""))
            if not message.get("more_body"):
                break
        body.seek(0)
        request = ASGIRequest(scope, body)
        kwargs = scope.get("url_route", {}).get("kwargs", {})
        response = await _in_pool(self.view, request, **kwargs)
        poll: LongPoll | None = getattr(response, "long_poll", None)
        if poll is not None and poll.timeout > 0:
            response = await self._wait(poll, receive)
            if response is None:  # client went away
                return
        await _send(response, send)

    async def _wait(self, poll: LongPoll, receive) -> HttpResponse | None:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        for group in poll.groups:
            await layer.group_add(group, channel)
        disconnect = asyncio.ensure_future(receive())
        try:
            # The state may have changed between the view's read and the subscription.
            data = await _in_pool(poll.again, False)
            if data is not None:
                return _json(data)
            wake = asyncio.ensure_future(layer.receive(channel))
            deadline = asyncio.get_running_loop().time() + poll.timeout
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    wake.cancel()
                    break
                done, _ = await asyncio.wait({wake, disconnect}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                if disconnect in done:
                    wake.cancel()
                    return None
                if wake in done:
                    data = await _in_pool(poll.again, False)
                    if data is not None:
                        return _json(data)
                    wake = asyncio.ensure_future(layer.receive(channel))
            return _json(await _in_pool(poll.again, True))
        finally:
            if not disconnect.done():
                disconnect.cancel()
            for group in poll.groups:
                await layer.group_discard(group, channel)


def _json(data: Any) -> HttpResponse:
    return HttpResponse(JSONRenderer().render(data), content_type="application/json")


async def _send(response: HttpResponse, send) -> None:
    headers = [(b"content-type", response["Content-Type"].encode("latin-1"))]
    for name, value in response.items():
        if name.lower() != "content-type":
            headers.append((name.encode("latin-1"), str(value).encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
