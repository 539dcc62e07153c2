"""Attacks on ``/mcp`` against a real ``manage.py serve`` (daphne on 127.0.0.1), where the server's
own reading matters: daphne reads a body before the application runs, so the bound on what an
unauthenticated client can make it take is ``askcards.http.serverguard``'s (the declared length
refused before a byte is sent; a chunked body cut soon after the limit, or after 8 KB without a good
key: tests/security/test_key_before_body.py). Also on the wire:
the 401's challenge, Host and Origin, the security headers of the SSE stream, the official SDK
client with a bad key or a session it may not name, and no key in the server's log."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import requests
from mcp.shared.exceptions import MCPError

from tests import serving
from tests.mcp import support

HUGE = 150 * 1024 * 1024  # declared, never sent
CHUNK = 256 * 1024
LIMIT = 2_621_440  # DATA_UPLOAD_MAX_MEMORY_SIZE
LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2025-11-25"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One seeded server for the module: (base URL, seed with both agents' keys, its log file)."""
    data_dir = tmp_path_factory.mktemp("mcp-served")
    with support.seeded(data_dir) as (base, seed):
        yield base, seed, data_dir / "serve.log"


_head = serving.read_head


def _assert_security_headers(headers) -> None:
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("auth", ["", "Authorization: Bearer ak_not-a-key\r\n", "valid"])
def test_a_declared_huge_body_is_refused_before_any_of_it_is_sent(served, auth):
    base, seed, _ = served
    if auth == "valid":
        auth = f"Authorization: Bearer {seed['key']}\r\n"
    sock = serving.raw_connection(base)
    sock.sendall(f"POST /mcp?{support.WEB_SESSION} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Accept: application/json, text/event-stream\r\n{auth}Content-Length: {HUGE}\r\n\r\n".encode())
    head = _head(sock)
    sock.close()
    assert head.startswith(b"HTTP/1.1 413 "), head[:200]
    assert b"x-content-type-options: nosniff" in head.lower()


@pytest.mark.parametrize("keyed", [False, True])
def test_a_streamed_body_is_cut_soon_after_the_limit(served, keyed):
    base, seed, _ = served
    auth = f"Authorization: Bearer {seed['key']}\r\n" if keyed else ""
    sock = serving.raw_connection(base)
    sock.sendall(f"POST /mcp?{support.WEB_SESSION} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"{auth}Transfer-Encoding: chunked\r\n\r\n".encode())
    sent, deadline = 0, time.monotonic() + 20
    try:
        while sent < 40 * LIMIT and time.monotonic() < deadline:
            sock.sendall(b"%x\r\n%s\r\n" % (CHUNK, b"x" * CHUNK))
            sent += CHUNK
    except OSError:  # the server closed the connection: what we want
        pass
    sock.close()
    # The kernel buffers a few MB either side; an unbounded server would have taken all 100 MB.
    assert sent < 10 * LIMIT, f"the server was still reading after {sent} bytes"
    assert requests.get(f"{base}/healthz", timeout=10).text == "ok"


@pytest.mark.parametrize("authorization", [None, "Bearer ak_not-a-key", "Basic YWxpY2U6cHc=", "Bearer"])
def test_a_bad_key_is_401_with_the_bearer_challenge(served, authorization):
    base, _, _ = served
    headers = dict(MCP_HEADERS, **({"authorization": authorization} if authorization else {}))
    response = requests.post(f"{base}/mcp?{support.WEB_SESSION}", data=LIST, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "invalid_key"
    _assert_security_headers(response.headers)


def test_the_sse_stream_carries_the_security_headers(served):
    base, seed, _ = served
    headers = dict(MCP_HEADERS, authorization=f"Bearer {seed['key']}")
    with requests.post(f"{base}/mcp?{support.WEB_SESSION}", data=LIST, headers=headers, timeout=10,
                       stream=True) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        _assert_security_headers(response.headers)
        data = next(line for line in response.iter_lines() if line.startswith(b"data:"))
    assert [tool["name"] for tool in json.loads(data[5:])["result"]["tools"]] == ["ask_user_questions"]


@pytest.mark.parametrize("host, origin, status", [
    ("evil.example", None, 400),
    ("127.0.0.1.evil.example", None, 400),
    ("127.0.0.1", "http://evil.example", 403),
    ("127.0.0.1", "http://127.0.0.1:1", 403),  # another port of this host: another origin
    ("127.0.0.1", "null", 403),
])
def test_host_and_origin_are_checked_on_the_wire(served, host, origin, status):
    base, seed, _ = served
    headers = dict(MCP_HEADERS, authorization=f"Bearer {seed['key']}", host=host)
    if origin:
        headers["origin"] = origin
    response = requests.post(f"{base}/mcp?{support.WEB_SESSION}", data=LIST, headers=headers, timeout=10)
    assert response.status_code == status
    assert response.json()["error"]["code"] == ("bad_request" if status == 400 else "forbidden")
    _assert_security_headers(response.headers)


def test_the_sites_own_origin_is_served_on_the_wire(served):
    base, seed, _ = served
    headers = dict(MCP_HEADERS, authorization=f"Bearer {seed['key']}", origin=base)
    response = requests.post(f"{base}/mcp?{support.WEB_SESSION}", data=LIST, headers=headers, timeout=10)
    assert response.status_code == 200 and "ask_user_questions" in response.text


@pytest.mark.parametrize("target", [b"/mcp?session=\xff&platform=web", b"/mcp?session=a\x00b"])
def test_a_request_line_that_is_not_ascii_is_refused_by_the_server(served, target):
    """daphne refuses it before the application (which would otherwise meet Django's
    UnicodeDecodeError on a non-UTF-8 query string)."""
    base, seed, log = served
    sock = serving.raw_connection(base)
    sock.sendall(b"POST " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + seed["key"].encode()
                 + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(LIST), LIST))
    head = _head(sock)
    sock.close()
    assert head.startswith(b"HTTP/1.1 400 "), head[:200]
    assert "Traceback" not in log.read_text()


def _mcp_error(group: BaseException) -> MCPError:
    """The MCPError inside the SDK client's (nested) exception groups."""
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    assert isinstance(group, MCPError), repr(group)
    return group


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_sdk_client_fails_cleanly_with_a_bad_key_or_a_session_it_may_not_name(served, mode):
    base, seed, _ = served

    async def attempt(key: str, query: str) -> MCPError:
        try:
            async with asyncio.timeout(support.TIMEOUT):
                async with support.client(base, key, query, mode=mode) as mcp:
                    await mcp.list_tools()
        except BaseException as exc:  # noqa: BLE001 - the client raises exception groups
            return _mcp_error(exc)
        raise AssertionError("the client was served")

    async def scenario():
        refused = await attempt("ak_" + "x" * 43, support.WEB_SESSION)
        assert refused.code == -32603  # the SDK client reports an HTTP 401 as "Server returned an error"
        ungranted = await attempt(seed["key"], "session=mcp-carol&platform=web&web_user=carol")
        assert ungranted.code == -32602 and "may not ask web user 'carol'" in str(ungranted)
        smuggled = await attempt(seed["key"], support.WEB_SESSION + "&parent=x")
        assert smuggled.code == -32602 and "unknown URL parameter 'parent'" in str(smuggled)

    asyncio.run(scenario())


def test_no_key_reaches_the_servers_log(served):
    """After every test above (the module's server is shared): refusals were logged, keys were not."""
    base, seed, log = served
    headers = dict(MCP_HEADERS, authorization=f"Bearer {seed['other_key']}x")
    assert requests.post(f"{base}/mcp?{support.WEB_SESSION}", data=LIST, headers=headers, timeout=10).status_code == 401
    text = Path(log).read_text()
    assert "refused POST /mcp: 401" in text
    for key in (seed["key"], seed["other_key"]):
        assert key not in text and key[3:20] not in text
    assert "Traceback" not in text
