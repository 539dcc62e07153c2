from django.urls import path, re_path, register_converter
from django.urls.converters import StringConverter
from django.views.decorators.csrf import csrf_exempt

from askcards.http import edge

from . import views

app_name = "api"


class RefConverter(StringConverter):
    """A session or ask reference in a path: like ``str``, minus NUL, which PostgreSQL cannot compare."""

    regex = r"[^/\x00]+"


register_converter(RefConverter, "ref")

# Views that may long-poll; project.asgi serves these paths through LongPollApp.
LONG_POLL_VIEWS = {
    "tools/call": views.ToolCallApi,
    "asks/<ref:ask_id>/wait": views.AskWaitApi,
    "events": views.EventsApi,
}


@csrf_exempt  # an unknown path has nothing to protect: the JSON 404, not the CSRF 403 page
def no_endpoint(request, *args, **kwargs):
    """Anything else under /api/v1/ gets the API's JSON error instead of Django's HTML 404 page."""
    message = f"no API endpoint {request.method} {request.path!r}; the endpoints are listed at /api/docs/"
    return edge.error_response(404, "not_found", message)


urlpatterns = [
    path("sessions", views.SessionUpsertApi.as_view(), name="session-upsert"),
    path("sessions/<ref:session_id>", views.SessionDetailApi.as_view(), name="session-detail"),
    path("sessions/<ref:session_id>/tools", views.SessionToolsApi.as_view(), name="session-tools"),
    path("sessions/<ref:session_id>/messages", views.SessionMessageApi.as_view(), name="session-messages"),
    path("sessions/<ref:session_id>/progress", views.SessionProgressApi.as_view(), name="session-progress"),
    path("sessions/<ref:session_id>/recover", views.SessionRecoverApi.as_view(), name="session-recover"),
    path("recover", views.AgentRecoverApi.as_view(), name="agent-recover"),
    path("tools/call", views.ToolCallApi.as_view(), name="tool-call"),
    path("asks", views.AskListApi.as_view(), name="ask-list"),
    path("asks/<ref:ask_id>", views.AskDetailApi.as_view(), name="ask-detail"),
    path("asks/<ref:ask_id>/wait", views.AskWaitApi.as_view(), name="ask-wait"),
    path("asks/<ref:ask_id>/cancel", views.AskCancelApi.as_view(), name="ask-cancel"),
    path("events", views.EventsApi.as_view(), name="events"),
    path("events/ack", views.EventsAckApi.as_view(), name="events-ack"),
    re_path(r"^", no_endpoint, name="no-endpoint"),  # keep last
]
