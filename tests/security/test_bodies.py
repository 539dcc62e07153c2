"""Issue 10, point 1: no route reads an oversized or unauthenticated body.

Every request goes through the real ASGI application; the hand-made receive() counts what the
application pulls, so "refused without reading" is observable (and nothing big is allocated)."""
import json

import pytest
from django.conf import settings

from askcards.http.edge import MAX_CALLBACK_BYTES
from tests.security.edge_client import CHUNK, call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

HUGE = 150 * 1024 * 1024  # the report's 150 MB: declared, never sent


def _json_headers(length: int, key: str | None = None):
    headers = [("content-type", "application/json"), ("content-length", str(length))]
    return headers + ([("authorization", f"Bearer {key}")] if key else [])


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/tools/call",  # long-poll route
        "/api/v1/asks/q_x/wait",  # long-poll route (POST)
        "/callbacks/feishu/cli_x/",  # callback route
        "/callbacks/dingtalk/ding_x/",
        "/api/v1/sessions",  # Django's handler
        "/login/",
        "/static/askcards/panel.js",  # the static files handler
    ],
)
async def test_oversized_content_length_is_refused_before_reading(path, agent_and_key):
    response = await call("POST", path, headers=_json_headers(HUGE, agent_and_key[1]), stream_bytes=4 * len(CHUNK))
    assert response.status == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert response.pulled_messages == 0


@pytest.mark.parametrize(
    "path, limit",
    [
        ("/api/v1/tools/call", None),
        ("/callbacks/feishu/cli_x/", MAX_CALLBACK_BYTES),
        ("/api/v1/sessions", None),
    ],
)
async def test_streamed_body_is_cut_at_the_limit(path, limit, agent_and_key):
    limit = limit or settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    headers = [("content-type", "application/json"), ("authorization", f"Bearer {agent_and_key[1]}")]
    # A chunked body (no Content-Length) of twice the limit: reading stops just past the limit.
    response = await call("POST", path, headers=headers, stream_bytes=2 * limit + len(CHUNK))
    assert response.status == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert limit < response.pulled_bytes <= limit + len(CHUNK)


async def test_unauthenticated_long_poll_post_is_401_before_its_body_is_read(db):
    for headers in (_json_headers(1000), _json_headers(1000, "not-a-key")):
        response = await call("POST", "/api/v1/tools/call", headers=headers, stream_bytes=1000)
        assert response.status == 401
        assert response.json()["error"]["code"] in ("not_authenticated", "invalid_key")
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.pulled_messages == 0


async def test_authenticated_long_poll_post_within_the_limit_is_served(agent_and_key, present_session):
    body = json.dumps({"session": present_session.key, "name": "no_such_tool", "arguments": {}}).encode()
    response = await call("POST", "/api/v1/tools/call", headers=_json_headers(len(body), agent_and_key[1]), body=body)
    assert response.status == 400 and response.json()["error"]["code"] == "unknown_tool"  # authenticated, body parsed
    assert response.pulled_bytes == len(body)


async def test_long_poll_get_takes_no_body(agent_and_key, pending_ask):
    headers = [("authorization", f"Bearer {agent_and_key[1]}"), ("content-length", "100000")]
    response = await call("GET", f"/api/v1/asks/{pending_ask.id}/wait", headers=headers, stream_bytes=100000)
    assert response.status == 413 and response.pulled_messages == 0


@pytest.mark.parametrize("value", ["abc", "-1", "1e6", "12, 12"])
@pytest.mark.parametrize("path", ["/api/v1/tools/call", "/callbacks/feishu/cli_x/", "/api/v1/sessions"])
async def test_malformed_content_length_is_400(path, value, db):
    response = await call("POST", path, headers=[("content-length", value)], body=b"{}")
    assert response.status == 400 and response.json()["error"]["code"] == "bad_request"
    assert response.pulled_messages == 0
