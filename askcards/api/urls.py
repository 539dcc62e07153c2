from django.urls import path

from . import views

app_name = "api"

# Views that may long-poll; project.asgi serves these paths through LongPollApp.
LONG_POLL_VIEWS = {
    "tools/call": views.ToolCallApi,
    "asks/<str:ask_id>/wait": views.AskWaitApi,
    "events": views.EventsApi,
}

urlpatterns = [
    path("sessions", views.SessionUpsertApi.as_view(), name="session-upsert"),
    path("sessions/<str:session_id>", views.SessionDetailApi.as_view(), name="session-detail"),
    path("sessions/<str:session_id>/tools", views.SessionToolsApi.as_view(), name="session-tools"),
    path("sessions/<str:session_id>/messages", views.SessionMessageApi.as_view(), name="session-messages"),
    path("sessions/<str:session_id>/recover", views.SessionRecoverApi.as_view(), name="session-recover"),
    path("recover", views.AgentRecoverApi.as_view(), name="agent-recover"),
    path("tools/call", views.ToolCallApi.as_view(), name="tool-call"),
    path("asks", views.AskListApi.as_view(), name="ask-list"),
    path("asks/<str:ask_id>", views.AskDetailApi.as_view(), name="ask-detail"),
    path("asks/<str:ask_id>/wait", views.AskWaitApi.as_view(), name="ask-wait"),
    path("asks/<str:ask_id>/cancel", views.AskCancelApi.as_view(), name="ask-cancel"),
    path("events", views.EventsApi.as_view(), name="events"),
]
