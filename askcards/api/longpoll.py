"""Long-polls that hold no thread and no database connection while they wait.

The DRF view does the real work (auth, validation, the first read) in a pooled thread and, when
the answer is "not yet", attaches a ``LongPoll`` to its response. The ASGI app below then parks the
request in the process's hub (``askcards.wake.hub``: one entry under each of the view's keys), re-runs
the view's ``again`` in a pooled thread when woken or timed out, and sends that response.

A view served here (``parks_here``) may leave its first read to ``again``: the app runs it once the
waiter is registered, which it must do anyway (what changed between a read and the registration
would otherwise be missed), and renders what it raises as the view would (a 404, say). A REST
client that waits by sending the wait again every minute then costs one read of the ask fewer
each time.

Served by ``project.asgi`` ahead of Django's handler: Django's ASGI handler gives every request a
dedicated thread for its sync parts, which would mean one idle thread per waiter. Under a plain
WSGI server the same views answer at once with the current state (no waiting).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Callable

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from askcards.http import edge
from askcards.wake import events
from askcards.operators import metrics
from askcards import services
from askcards.db import in_pool

from .leases import KEEPER


@dataclass
class LongPoll:
    keys: list[str]  # what it waits on (``askcards.wake.events``)
    timeout: float
    # again(final) -> the response body (JSON data, or a whole HttpResponse), or None while still
    # waiting (final=False only).
    again: Callable[[bool], Any]
    agent_id: int  # whose wait it is (the agent's parked-waits quota counts it while it waits)
    # Run (in the pool) when the client goes away before the answer: what it waited for is withdrawn.
    leave: Callable[[], None] | None = None
    # The ask whose lease (services.waiters) this waiter holds while it is parked.
    lease: str | None = None


class LongPollResponse(Response):
    """A view's response that may carry a ``LongPoll``: then ``LongPollApp`` waits on its keys.

    Its data may be given ``later``: computed only when the response is rendered, which a parked
    long-poll never is (``LongPollApp`` answers with ``again``'s data instead). A client that waits
    by re-polling every minute thus costs one rendering per minute, not two; under a server
    without ``LongPollApp`` (plain WSGI) the response renders its data at once, as any other."""

    long_poll: LongPoll | None = None

    def __init__(self, data: Any = None, *args: Any, later: Callable[[], Any] | None = None, **kwargs: Any):
        self._later = later
        super().__init__(data, *args, **kwargs)

    @property
    def data(self) -> Any:
        if self._later is not None:
            self._data, self._later = self._later(), None
        return self._data

    @data.setter
    def data(self, value: Any) -> None:
        self._data = value


PARKS = "askcards.long_poll"  # set in the ASGI scope of a request ``LongPollApp`` serves


def parks_here(request: Any) -> bool:
    """Whether ``request`` (Django's or DRF's) is served by ``LongPollApp``: a ``LongPoll`` on its
    response is waited on, and ``again`` is run once the waiter is registered before anything else.
    Under another server (plain WSGI) the view answers at once with the current state."""
    return bool(getattr(request, "scope", {}).get(PARKS))


def _parks(response: Any) -> bool:
    poll: LongPoll | None = getattr(response, "long_poll", None)
    return poll is not None and poll.timeout > 0


def _in_pool(fn, *args, **kwargs):
    """Run a view call in the shared thread pool (``askcards.db.in_pool``), rendered there too
    (unless it is a long-poll about to park: its body is ``again``'s)."""

    def call():
        response = fn(*args, **kwargs)
        if (response is not None and hasattr(response, "render") and not getattr(response, "is_rendered", True)
                and not _parks(response)):
            response.render()
        return response

    return in_pool(call)


class LongPollApp:
    """ASGI app serving one DRF view whose responses may carry a ``long_poll``.

    It bypasses Django's handler and middleware, so it does their edge work itself through
    ``askcards.http.edge``: ``Host`` checked, the security headers added, the body bounded. A ``GET``
    takes no body; a body (``POST``) is refused by ``Content-Length`` first, then the agent key is
    checked, and only then is the body read (at most ``DATA_UPLOAD_MAX_MEMORY_SIZE``): an
    unauthenticated client cannot make the server buffer anything. A method the view has no
    handler for is the view's 405 (with ``Allow``), its body never read."""

    BODILESS = frozenset({"GET", "HEAD"})

    def __init__(self, view: Callable):
        self.view = view

    async def __call__(self, scope, receive, send):
        kwargs = scope.get("url_route", {}).get("kwargs", {})
        # A method the view has no handler for is its 405 with its Allow header (after the agent
        # key, as every API view does), whatever body came: none of it is read. A GET takes no body.
        handled, bodiless = self._handles(scope["method"]), scope["method"] in self.BODILESS
        authenticate = functools.partial(self._authenticate, kwargs=kwargs) if handled and not bodiless else None
        admitted = await edge.admit(scope, receive, send, bodiless=bodiless, read=handled, authenticate=authenticate)
        if admitted is None:
            return
        agent, body = admitted.caller, admitted.body
        del admitted  # the edge's request is not needed past the prologue: a parked long-poll does not hold it
        request = ASGIRequest({**scope, PARKS: True}, BytesIO(body))
        if agent is not None:
            # Authenticated above, before the body was read: DRF's Request takes this attribute
            # as the authenticated user instead of checking the key a second time.
            request._force_auth_user = agent
        response = await _in_pool(self.view, request, **kwargs)
        if _parks(response):
            poll = response.long_poll
            # The view's response, DRF's request and the view refer to each other: a cycle that only
            # the garbage collector frees. Let go of it before the wait, while it is young and cheap
            # to collect, instead of keeping it for up to a minute, by when it would have reached the
            # oldest generation, whose collections pause the whole process (askcards/runtime/collector.py).
            del response
            with metrics.parked("rest"), services.parked_wait(poll.agent_id):
                response = await self._wait(poll, receive, functools.partial(self._again, request, kwargs, poll))
            if response is None:  # client went away
                if poll.leave is not None:
                    await in_pool(poll.leave)
                return
        await edge.send_response(send, response, request)

    def _handles(self, method: str) -> bool:
        """Whether the view has a handler for ``method`` (HEAD is GET's, as in Django's View)."""
        view_class = self.view.view_class  # type: ignore[attr-defined]  # set by as_view()
        name = method.lower()
        if name == "head":
            name = "get"
        return name in view_class.http_method_names and hasattr(view_class, name)

    def _view(self, request, kwargs):
        """A fresh instance of the view and DRF's request for ``request``, as its dispatch makes them."""
        view = self.view.view_class(**self.view.view_initkwargs)
        view.args, view.kwargs, view.headers = (), kwargs, view.default_response_headers
        drf_request = view.initialize_request(request, **kwargs)
        view.request = drf_request
        return view, drf_request

    @staticmethod
    def _refusal(view, drf_request, kwargs, exc: Exception) -> HttpResponse:
        """The view's own rendered response to ``exc`` (its exception handler's error shape)."""
        response = view.finalize_response(drf_request, view.handle_exception(exc), **kwargs)
        response.render()
        return response

    def _authenticate(self, request, kwargs):
        """``(agent, None)``, or ``(None, the view's own rendered error response)`` when the request
        carries no valid agent key. Only the view's authentication and permissions run here (no
        throttles, no body)."""
        view, drf_request = self._view(request, kwargs)
        try:
            view.perform_authentication(drf_request)
            view.check_permissions(drf_request)
        except Exception as exc:
            return None, self._refusal(view, drf_request, kwargs, exc)
        return drf_request.user, None

    def _again(self, request, kwargs, poll: LongPoll, final: bool) -> Any:
        """``poll.again(final)``; what it raises (the first read of a view that left it to ``again``:
        another agent's ask, say) answered as the view answers it."""
        try:
            return poll.again(final)
        except Exception as exc:
            view, drf_request = self._view(request, kwargs)
            return self._refusal(view, drf_request, kwargs, exc)

    async def _wait(self, poll: LongPoll, receive, again: Callable[[bool], Any]) -> HttpResponse | None:
        """Park until woken (then re-read), the client leaves (None) or the timeout (final read).

        The bus may fail under the wait (Redis stopped or restarted): the waiter then has it
        re-read every ``events.LAYER_RETRY_SECONDS`` until the bus is back."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll.timeout
        disconnect = asyncio.ensure_future(receive())
        try:
            async with events.Waiter("long-poll") as waiter:
                for key in poll.keys:
                    await waiter.add(key)
                with KEEPER.holding(poll.lease) if poll.lease else contextlib.nullcontext():
                    while True:
                        # Read after registering (the state may have changed since the view's read),
                        # and again after every wake or re-read the waiter asks for.
                        data = await _in_pool(again, False)
                        if data is not None:
                            return _json(data)
                        remaining = deadline - loop.time()
                        if remaining <= 0:
                            break
                        await waiter.receive(remaining, stop=disconnect)
                        if disconnect.done():
                            return None
                        if loop.time() >= deadline:
                            break
            return _json(await _in_pool(again, True))
        finally:
            if not disconnect.done():
                disconnect.cancel()


def _json(data: Any) -> HttpResponse:
    if isinstance(data, HttpResponse):
        return data
    return HttpResponse(JSONRenderer().render(data), content_type="application/json")

