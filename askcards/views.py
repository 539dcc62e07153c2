"""The person-facing web pages: sign-in and the live answer panel (SPEC §6.3).

The panel page is a shell: everything it shows arrives over ``/ws/panel/`` (see consumers.py), so
a reload or a reconnect shows the same state. No build step — plain HTML, CSS and one script.
"""
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import render


@login_required
def panel(request):
    return render(request, "askcards/panel.html")


login = auth_views.LoginView.as_view(template_name="askcards/login.html", redirect_authenticated_user=True)
logout = auth_views.LogoutView.as_view()
