"""Issue 10, point 9 (routes): the long-poll and callback routes, served without Django's
middleware, check Host like the rest and send the same security headers."""
import logging

import pytest

from tests.security.edge_client import call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ROUTES = [("POST", "/callbacks/feishu/cli_x/"), ("POST", "/api/v1/tools/call"), ("GET", "/api/v1/events")]


@pytest.mark.parametrize("method, path", ROUTES)
@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.evil.example:8000", "127.0.0.1:8000@evil.example"])
async def test_bad_host_is_400_without_traceback(method, path, host, agent_and_key, caplog):
    headers = [("authorization", f"Bearer {agent_and_key[1]}"), ("content-type", "application/json")]
    with caplog.at_level(logging.WARNING):
        response = await call(method, path, host=host, headers=headers, body=b"{}" if method == "POST" else b"")
    assert response.status == 400
    assert response.json()["error"]["code"] == "bad_request"
    assert "host" in response.json()["error"]["message"].lower()
    assert response.pulled_messages == 0
    assert [r.name for r in caplog.records if r.levelno >= logging.WARNING] == ["django.security.DisallowedHost"]
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("method, path", [("GET", "/api/v1/asks"), ("POST", "/api/v1/sessions")])
async def test_bad_host_on_the_rest_of_the_api_is_the_apis_json_error(method, path, agent_and_key):
    # Served by Django's handler, which refuses the Host before any view runs: the agent still
    # reads the API's error shape, not an HTML page.
    headers = [("authorization", f"Bearer {agent_and_key[1]}"), ("content-type", "application/json")]
    response = await call(method, path, host="evil.example", headers=headers, body=b"{}" if method == "POST" else b"")
    assert response.status == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "bad_request"
    assert "host" in response.json()["error"]["message"].lower()


async def test_bad_host_on_a_page_is_still_djangos_page():
    response = await call("GET", "/panel/", host="evil.example")
    assert response.status == 400
    assert response.headers["content-type"].startswith("text/html")


def _assert_django_security_headers(headers):
    # What Django's SecurityMiddleware and XFrameOptionsMiddleware add to the rest of the site.
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["x-frame-options"] == "DENY"


async def _good_requests(key):
    auth = [("authorization", f"Bearer {key}"), ("content-type", "application/json")]
    return [
        await call("POST", "/callbacks/feishu/cli_x/", body=b"{}"),  # unknown app: 404
        await call("POST", "/api/v1/tools/call", headers=auth, body=b'{"name": "x"}'),  # 400
        await call("POST", "/api/v1/tools/call", body=b"{}"),  # no key: 401
        await call("GET", "/api/v1/events?wait=0", headers=auth),  # 200
    ]


async def test_good_requests_carry_the_security_headers(agent_and_key):
    responses = await _good_requests(agent_and_key[1])
    assert [r.status for r in responses] == [404, 400, 401, 200]
    for response in responses:
        _assert_django_security_headers(response.headers)
        assert "strict-transport-security" not in response.headers  # plain http, HSTS off


async def test_hsts_and_settings_follow_django(agent_and_key, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.X_FRAME_OPTIONS = "SAMEORIGIN"
    settings.SECURE_REFERRER_POLICY = "no-referrer"
    auth = [("authorization", f"Bearer {agent_and_key[1]}")]
    for path, headers in (("/callbacks/feishu/cli_x/", []), ("/api/v1/tools/call", auth)):
        response = await call("POST", path, headers=headers, body=b"{}", scheme="https")
        assert response.headers["strict-transport-security"] == "max-age=31536000; includeSubDomains"
        assert response.headers["x-frame-options"] == "SAMEORIGIN"
        assert response.headers["referrer-policy"] == "no-referrer"
        # Over plain http (no TLS, no trusted proxy header) HSTS is not sent, as Django does.
        response = await call("POST", path, headers=headers, body=b"{}")
        assert "strict-transport-security" not in response.headers


async def test_hsts_behind_a_tls_terminating_proxy(settings):
    settings.SECURE_HSTS_SECONDS = 600
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    response = await call("POST", "/callbacks/dingtalk/ding_x/", headers=[("x-forwarded-proto", "https")], body=b"{}")
    assert response.status == 404 and response.headers["strict-transport-security"] == "max-age=600"
