"""ASGI entry point: HTTP (Django, plus the long-poll endpoints served without a thread per
waiter) and WebSocket routing."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_asgi_app = get_asgi_application()  # before importing anything that touches models

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.http import Http404  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from channels.auth import AuthMiddlewareStack  # noqa: E402

from askcards.runtime import collector  # noqa: E402
from askcards.api.longpoll import LongPollApp  # noqa: E402
from askcards.pages.consumers import PanelConsumer  # noqa: E402
from askcards.api.urls import LONG_POLL_VIEWS  # noqa: E402
from askcards.callbacks import CallbackApp, dingtalk_handle, feishu_handle  # noqa: E402
from askcards.http.edge import BoundedBody, OriginValidator, no_socket  # noqa: E402
from askcards.hosts.views import HOOK_VIEWS  # noqa: E402
from askcards.mcp.app import McpApp  # noqa: E402
from askcards.http.serverguard import guard_server  # noqa: E402

# daphne's own reading: time limits, a per-peer cap, body limits, large keyed bodies read only
# after the key is checked (see askcards.http.serverguard).
guard_server()


class StaticFiles(ASGIStaticFilesHandler):
    """Django's static files handler, where a path escaping the static directories
    (``/static/askcards/..%2f..%2fsettings.py``) is a plain 404, like any missing file, instead
    of an unhandled SuspiciousFileOperation (a 500 and a traceback)."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousOperation:
            raise Http404("no such static file") from None


# The long-poll, callback and MCP routes bypass Django's handler and middleware; askcards.http.edge gives
# them Django's Host check, security headers and a bounded body (see LongPollApp, CallbackApp).
# Channels routes ASGI apps with Django's path(), which django-stubs types for views only, and its
# URLRouter (typed as taking channels' own pattern type) is an app Django's static files handler
# serves like its own: the `type: ignore[arg-type]`s below are those two seams.
http_routes = [path(f"api/v1/{route}", LongPollApp(view.as_view())) for route, view in LONG_POLL_VIEWS.items()]
# Agent hosts' hooks (Claude Code, Codex) wait for a person like a long-poll.
http_routes += [path(f"hooks/{host}", LongPollApp(view.as_view())) for host, view in HOOK_VIEWS.items()]
http_routes.append(path("callbacks/feishu/<str:app_id>/", CallbackApp(feishu_handle)))
http_routes.append(path("callbacks/dingtalk/<str:client_id>/", CallbackApp(dingtalk_handle)))
http_routes.append(path("mcp", McpApp()))  # MCP (Streamable HTTP): parked calls hold no thread either
http_routes.append(re_path(r"^", django_asgi_app))  # type: ignore[arg-type]  # everything else: Django

websocket_routes = [path("ws/panel/", PanelConsumer.as_asgi()), re_path(r"^", no_socket)]  # type: ignore[arg-type]

application = ProtocolTypeRouter(
    {
        # Static files (admin, panel) are served here too, so one daphne process is a whole service.
        # BoundedBody: no body over DATA_UPLOAD_MAX_MEMORY_SIZE is read, whichever route serves it
        # (Django's handler would otherwise spool any size to disk before any check).
        "http": BoundedBody(StaticFiles(URLRouter(http_routes))),  # type: ignore[arg-type]
        # The panel authenticates with the Django session cookie; the origin (scheme, host and
        # port) must be the site's own, ASKCARDS_PUBLIC_URL's or a CSRF-trusted one.
        "websocket": OriginValidator(AuthMiddlewareStack(URLRouter(websocket_routes))),  # type: ignore[arg-type]
    }
)

# Start-up is over: what it made lives as long as the process, and full collections are paced by
# askcards over what is not frozen, so parked waiters do not pause every answer (askcards/runtime/collector.py
# says why and by how much).
collector.settle()
