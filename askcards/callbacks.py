"""Platform callback routes, by platform. Thin: the surface's handler verifies and parses, the
service it is given does the click's effect, the handler replies from the committed state.
"""
from __future__ import annotations

from functools import partial

from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from askcards.http import edge
from askcards.operators import metrics
from askcards import services
from askcards.db import in_pool
from askcards.surfaces.dingtalk import handler as dingtalk_handler
from askcards.surfaces.feishu import handler as feishu_handler



def _view(handle):
    """The Django view of a callback handler ``handle(ref, headers, raw_body) -> (status, body)``
    (``headers`` a case-insensitive mapping).

    The work runs on the shared thread pool (connections kept per thread), not on a thread
    started for this one request."""

    @csrf_exempt
    @require_POST
    async def view(request, **kwargs):
        (ref,) = kwargs.values()  # the app id / client id in the URL
        status, body = await in_pool(handle, ref, request.headers, request.body)
        return JsonResponse(body, status=status)

    return view


class CallbackApp:
    """The ASGI route ``serve`` and daphne use for platform callbacks: the same handler as the
    Django view, without the session, auth, CSRF and message middleware that a platform's
    machine-to-machine POST never uses (each costs a thread hop per request on an async view).
    ``project/asgi.py`` routes ``/callbacks/…`` here; the Django URLconf keeps the view for WSGI
    servers and the test client."""

    def __init__(self, handle):
        self.handle = handle

    async def __call__(self, scope, receive, send):
        # Served without Django's handler: the edge's prologue does its work (Host, security
        # headers, a bounded body). Platforms sign their bodies, so there is nothing to
        # authenticate before reading; the route's limit is small instead.
        admitted = await edge.admit(scope, receive, send, check=_posted)
        if admitted is None:
            return
        (ref,) = scope["url_route"]["kwargs"].values()  # the app id / client id in the URL
        # request.headers is case-insensitive, like the Django view's: handlers just .get() a name.
        status, data = await in_pool(self.handle, ref, admitted.request.headers, admitted.body)
        response = JsonResponse(data, status=status, json_dumps_params={"ensure_ascii": False, "separators": (",", ":")})
        await edge.send_response(send, response, admitted.request)


def _posted(scope, request) -> HttpResponse | None:
    if scope["method"] == "POST":
        return None
    response = edge.error_response(405, "method_not_allowed", "Callbacks are POSTed.")
    response["Allow"] = "POST"
    return response


# ----------------------------------------------------------------------------------- the route
# Each platform's transport is its surface's handler (surfaces/<platform>/handler.py); the click's
# effect is the service it is given here, so the surfaces never call services.

feishu_handle = metrics.callback_timer("feishu")(partial(feishu_handler.http_callback, effect=services.feishu_callback))
dingtalk_handle = metrics.callback_timer("dingtalk")(
    partial(dingtalk_handler.http_callback, effect=services.dingtalk_callback)
)

feishu_callback = _view(feishu_handle)
dingtalk_callback = _view(dingtalk_handle)
