"""ASGI entry point: HTTP (Django, plus the long-poll endpoints served without a thread per
waiter) and WebSocket routing."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_asgi_app = get_asgi_application()  # before importing anything that touches models

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from askcards.api.longpoll import LongPollApp  # noqa: E402
from askcards.consumers import PanelConsumer  # noqa: E402
from askcards.api.urls import LONG_POLL_VIEWS  # noqa: E402
from askcards.callbacks import CallbackApp, dingtalk_handle, feishu_handle  # noqa: E402

http_routes = [path(f"api/v1/{route}", LongPollApp(view.as_view())) for route, view in LONG_POLL_VIEWS.items()]
http_routes.append(path("callbacks/feishu/<str:app_id>/", CallbackApp(feishu_handle)))
http_routes.append(path("callbacks/dingtalk/<str:client_id>/", CallbackApp(dingtalk_handle)))
http_routes.append(re_path(r"^", django_asgi_app))  # everything else: Django

websocket_routes = [path("ws/panel/", PanelConsumer.as_asgi())]

application = ProtocolTypeRouter(
    {
        # Static files (admin, panel) are served here too, so one daphne process is a whole service.
        "http": ASGIStaticFilesHandler(URLRouter(http_routes)),
        # The panel authenticates with the Django session cookie; the origin must be an allowed host.
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_routes))),
    }
)
