"""The person-facing web pages: sign-in and the live answer panel (SPEC §6.3).

The panel page is a shell: everything it shows arrives over ``/ws/panel/`` (see ``consumers``), so
a reload or a reconnect shows the same state. No build step — plain HTML, CSS and one script.
"""
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from askcards.http import edge
from askcards.operators import metrics as askcards_metrics
from askcards.tools import ANSWER_TEXT_MAX_CHARS

METRICS_REFUSALS = {
    401: ("not_authenticated", "send Authorization: Bearer <ASKCARDS_METRICS_TOKEN>"),
    403: ("forbidden", "this address is not in ASKCARDS_METRICS_ALLOW"),
}


@login_required
def panel(request):
    # The page's text boxes hold as much as the server accepts of one value.
    return render(request, "askcards/panel.html", {"text_max_chars": ANSWER_TEXT_MAX_CHARS})


@require_safe
def healthz(request):
    """Liveness for load balancers (and the benchmarks' trivial view): no database, no session."""
    return HttpResponse("ok", content_type="text/plain")


@require_safe
@never_cache
def metrics(request):
    """Prometheus text (askcards/operators/metrics.py), for a scraper with the token or from an allowed
    address; refused otherwise (404 while neither is configured)."""
    status = askcards_metrics.refusal(
        authorization=request.headers.get("Authorization", ""), remote_addr=request.META.get("REMOTE_ADDR", "")
    )
    if status == 404:
        raise Http404("no such page")  # not configured: the same answer as any unknown path
    if status is not None:
        code, message = METRICS_REFUSALS[status]
        response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
        if status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body, content_type = askcards_metrics.render()
    return HttpResponse(body, content_type=content_type)


login = auth_views.LoginView.as_view(template_name="askcards/login.html", redirect_authenticated_user=True)
logout = auth_views.LogoutView.as_view()


# Django's error pages for requests refused before any view ran (a Host not in ALLOWED_HOSTS, a
# malformed request): an agent on /api/ reads the API's JSON error shape, a person gets Django's page.
# Routes whose clients read JSON (agents, the chat platforms' callbacks, agent hosts' hooks, MCP):
# Django's own refusals there (a Host it does not serve, a body it will not parse) are JSON too.
JSON_ROUTES = ("/api/", "/callbacks/", "/hooks/", "/mcp")


def _is_api(request) -> bool:
    return request.path.startswith(JSON_ROUTES)


def bad_request(request, exception):
    if _is_api(request):
        return edge.error_response(400, "bad_request", "The request was refused (for example: a Host this server does not serve).")
    return defaults.bad_request(request, exception)


def server_error(request):
    if _is_api(request):
        return edge.error_response(500, "internal_error", "Internal error; the server log has the details.")
    return defaults.server_error(request)
