"""The person-facing web pages: sign-in and the live answer panel (SPEC §6.3).

The panel page is a shell: everything it shows arrives over ``/ws/panel/`` (see consumers.py), so
a reload or a reconnect shows the same state. No build step — plain HTML, CSS and one script.
"""
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.http import require_safe

from askcards import edge


@login_required
def panel(request):
    return render(request, "askcards/panel.html")


@require_safe
def healthz(request):
    """Liveness for load balancers (and the benchmarks' trivial view): no database, no session."""
    return HttpResponse("ok", content_type="text/plain")


login = auth_views.LoginView.as_view(template_name="askcards/login.html", redirect_authenticated_user=True)
logout = auth_views.LogoutView.as_view()


# Django's error pages for requests refused before any view ran (a Host not in ALLOWED_HOSTS, a
# malformed request): an agent on /api/ reads the API's JSON error shape, a person gets Django's page.
def _is_api(request) -> bool:
    return request.path.startswith("/api/")


def bad_request(request, exception):
    if _is_api(request):
        return edge.error_response(400, "bad_request", "The request was refused (for example: a Host this server does not serve).")
    return defaults.bad_request(request, exception)


def server_error(request):
    if _is_api(request):
        return edge.error_response(500, "internal_error", "Internal error; the server log has the details.")
    return defaults.server_error(request)
