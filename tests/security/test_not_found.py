"""Issue 10, point 11 (routing): unknown paths are plain 404s (JSON under the API), an unknown
WebSocket path is closed, a path escaping the static directories is a 404; none logs an ERROR
or a traceback."""
import logging

import pytest
from channels.testing import WebsocketCommunicator

from project.asgi import application
from tests.security.edge_client import call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _no_errors(caplog):
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "GET"])
@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/asks/q_x/nope", "/api/v1/"])
async def test_unknown_api_path_is_a_json_404(method, path, caplog):
    with caplog.at_level(logging.INFO):
        response = await call(method, path, headers=[("content-type", "application/json")], body=b"{}")
    assert response.status == 404
    error = response.json()["error"]
    assert error["code"] == "not_found" and path in error["message"]
    _no_errors(caplog)


@pytest.mark.parametrize("path", ["/ws/nope/", "/ws/panel", "/"])
async def test_unknown_socket_path_is_closed_without_traceback(path, caplog):
    communicator = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
    with caplog.at_level(logging.INFO):
        connected, code = await communicator.connect(timeout=5)
    assert not connected and code == 4404
    _no_errors(caplog)


@pytest.mark.parametrize(
    "path",
    [
        "/static/askcards/../../settings.py",  # what servers pass for ..%2f..%2fsettings.py (decoded)
        "/static/askcards/..%2f..%2fsettings.py",
        "/static/../project/settings.py",
        "/static/askcards/no-such-file.js",
    ],
)
async def test_static_path_escaping_the_static_directories_is_404(path, caplog):
    with caplog.at_level(logging.INFO):
        response = await call("GET", path)
    assert response.status == 404
    assert b"SECRET_KEY" not in response.body
    _no_errors(caplog)


@pytest.mark.parametrize("path", ["/panel/", "/login/", "/admin/", "/api/v1/asks", "/healthz"])
async def test_a_host_django_does_not_serve_is_a_400_without_traceback(path, caplog):
    with caplog.at_level(logging.INFO):
        response = await call("GET", path, host="evil.example.com")
    assert response.status == 400
    _no_errors(caplog)
    assert any(r.name == "django.security.DisallowedHost" for r in caplog.records)  # still logged, as a warning


@pytest.mark.asyncio
async def test_an_admin_page_the_operator_may_not_see_is_a_403_without_traceback(caplog):
    from asgiref.sync import sync_to_async
    from django.test import Client

    from tests.conftest import person

    def denied_page():
        operator = person("limited-operator")
        operator.is_staff = True
        operator.save()
        client = Client()
        client.force_login(operator)
        return client.get("/admin/askcards/ask/add/")

    with caplog.at_level(logging.INFO):
        response = await sync_to_async(denied_page)()
    assert response.status_code == 403
    _no_errors(caplog)
    assert any(r.name == "django.request" and "Forbidden" in r.getMessage() for r in caplog.records)
