"""Issue 10, point 9: a deployment behind https is configured safely, sign-in is throttled, and
the API docs work without a CDN."""
from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import User
from django.utils import timezone

ROOT = Path(__file__).resolve().parent.parent.parent
PUBLIC_URL = "https://askcards.example.com"


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    """A clean embedded-default environment (whatever this shell has set) plus ``extra``."""
    drop = {"DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS", "DEBUG", "ASKCARDS_PUBLIC_URL", "ASKCARDS_SECRET_KEY"}
    ours = ("ASKCARDS_HSTS", "ASKCARDS_SSL", "ASKCARDS_PROXY")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(ours)}
    env.update(ASKCARDS_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="project.settings", **extra)
    return env


def test_check_deploy_passes_for_an_https_public_url(tmp_path):
    env = _env(tmp_path, ASKCARDS_PUBLIC_URL=PUBLIC_URL, ASKCARDS_SECRET_KEY=secrets.token_urlsafe(50))
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


# Requests through Django's test client in a fresh process (settings are read at start), each
# answered with the facts a browser would see.
PROBE = r"""
import json, sys
import django
django.setup()
from django.test import Client
host = sys.argv[1]
out = {}
for name, path, extra in [
    ("login_https", "/login/", {"secure": True}),
    ("login_http", "/login/", {}),
    ("healthz_http", "/healthz", {}),
    ("login_proxied", "/login/", {"HTTP_X_FORWARDED_PROTO": "https"}),
]:
    response = Client(HTTP_HOST=host).get(path, **extra)
    cookie = response.cookies.get("csrftoken")
    out[name] = {
        "status": response.status_code,
        "location": response.get("Location"),
        "hsts": response.get("Strict-Transport-Security"),
        "csrf_cookie_secure": bool(cookie and cookie["secure"]),
    }
print(json.dumps(out))
"""


def _probe(env: dict[str, str], host: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, host], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_https_public_url_secures_cookies_sends_hsts_and_redirects_http(tmp_path):
    env = _env(tmp_path, ASKCARDS_PUBLIC_URL=PUBLIC_URL, ASKCARDS_SECRET_KEY=secrets.token_urlsafe(50))
    seen = _probe(env, "askcards.example.com")
    assert seen["login_https"]["status"] == 200
    assert seen["login_https"]["csrf_cookie_secure"] is True
    assert seen["login_https"]["hsts"] == "max-age=31536000; includeSubDomains; preload"
    # Plain http is sent to https, except the load balancer's health probe.
    assert seen["login_http"]["status"] == 301
    assert seen["login_http"]["location"] == "https://askcards.example.com/login/"
    assert seen["healthz_http"]["status"] == 200
    # Without ASKCARDS_PROXY_SSL_HEADER a client's X-Forwarded-Proto is not believed.
    assert seen["login_proxied"]["status"] == 301


def test_a_tls_terminating_proxy_is_believed_once_named(tmp_path):
    env = _env(
        tmp_path,
        ASKCARDS_PUBLIC_URL=PUBLIC_URL,
        ASKCARDS_SECRET_KEY=secrets.token_urlsafe(50),
        ASKCARDS_PROXY_SSL_HEADER="X-Forwarded-Proto",
        ASKCARDS_HSTS_SECONDS="3600",
    )
    seen = _probe(env, "askcards.example.com")
    assert seen["login_proxied"]["status"] == 200
    assert seen["login_proxied"]["csrf_cookie_secure"] is True
    assert seen["login_proxied"]["hsts"] == "max-age=3600; includeSubDomains; preload"


def test_local_http_use_keeps_plain_cookies(tmp_path):
    seen = _probe(_env(tmp_path), "127.0.0.1")
    assert seen["login_http"]["status"] == 200
    assert seen["login_http"]["csrf_cookie_secure"] is False
    assert seen["login_http"]["hsts"] is None


def test_a_malformed_proxy_header_setting_is_refused(tmp_path):
    env = _env(tmp_path, ASKCARDS_PROXY_SSL_HEADER="X-Forwarded-Proto: https; evil")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ASKCARDS_PROXY_SSL_HEADER" in done.stderr


# --- sign-in throttling ---------------------------------------------------------------------

PASSWORD = "correct horse battery staple"


@pytest.fixture
def person(db):
    return User.objects.create_user("ada", password=PASSWORD, is_staff=True, is_superuser=True)


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_guessing_a_password_locks_the_sign_in_for_a_cool_off(client, person, settings, path):
    from axes.models import AccessAttempt
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = client.post(path, {"username": "ada", "password": "wrong"})
        assert response.status_code == 200  # the form again, with its error
    response = client.post(path, {"username": "ada", "password": "wrong"})
    assert response.status_code == 429
    # Now even the right password is refused, with a clear message rather than a crash.
    response = client.post(path, {"username": "ada", "password": PASSWORD})
    assert response.status_code == 429
    assert "too many login attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session
    # The attempts are rows in the database (every process agrees), without the password.
    attempt = AccessAttempt.objects.get(username="ada")
    assert "wrong" not in attempt.post_data and PASSWORD not in attempt.post_data
    # After the cool-off the right password works again.
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    response = client.post(path, {"username": "ada", "password": PASSWORD})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(person.pk)


def test_a_lockout_is_per_username_and_address(client, person, settings):
    User.objects.create_user("grace", password=PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post("/login/", {"username": "ada", "password": "wrong"})
    assert client.post("/login/", {"username": "ada", "password": PASSWORD}).status_code == 429
    # Another account from the same address, and the same account from elsewhere, still sign in.
    assert client.post("/login/", {"username": "grace", "password": PASSWORD}).status_code == 302
    client.logout()
    response = client.post("/login/", {"username": "ada", "password": PASSWORD}, REMOTE_ADDR="192.0.2.7")
    assert response.status_code == 302


# --- API docs without a CDN -------------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.urls += [value for name, value in attrs if name in {"src", "href"} and value]


async def _get(path: str) -> tuple[int, bytes]:
    """GET through the ASGI application serve and daphne run (it serves the static files)."""
    from project.asgi import application

    communicator = ApplicationCommunicator(
        application,
        {"type": "http", "http_version": "1.1", "method": "GET", "path": path, "raw_path": path.encode(),
         "query_string": b"", "headers": [(b"host", b"localhost")], "scheme": "http", "server": ("localhost", 80)},
    )
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(10)
    body = b""
    while True:
        message = await communicator.receive_output(10)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await communicator.wait(10)
    return start["status"], body


@pytest.mark.asyncio
async def test_api_docs_load_swagger_ui_from_our_own_static_files():
    status, body = await _get("/api/docs/")
    assert status == 200
    page = body.decode()
    parser = _Links()
    parser.feed(page)
    # Every URL the page loads, including those its script builds, is on this server.
    assert not re.search(r"https?://|//cdn|jsdelivr|unpkg", page), page
    scripts_and_styles = [url for url in parser.urls if url.startswith("/static/")]
    assert any(url.endswith("swagger-ui-bundle.js") for url in scripts_and_styles)
    assert any(url.endswith("swagger-ui.css") for url in scripts_and_styles)
    for url in scripts_and_styles:
        status, content = await _get(url.split("?")[0])
        assert status == 200, url
        assert content
