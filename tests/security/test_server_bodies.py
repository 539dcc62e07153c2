"""Issue 10, point 1, at the server: daphne itself (under ``manage.py serve``, a real process on
127.0.0.1) stops reading a body past the limit. Without ``askcards.http.serverguard`` (its request class) it
took in the whole body (a temporary file) before the application could refuse it."""
from __future__ import annotations

import socket
import time

import pytest
import requests

from tests import serving

HUGE = 150 * 1024 * 1024  # declared, never sent
CHUNK = 256 * 1024
LIMIT = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, the largest body any route takes


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    env = serving.service_env(tmp_path_factory.mktemp("served"))
    serving.manage(env, "migrate", "-v0")
    with serving.serve(env) as base:
        yield base


def _status_line(sock: socket.socket) -> str:
    data = b""
    while b"\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            break
        data += piece
    return data.split(b"\r\n", 1)[0].decode("latin-1")


@pytest.mark.parametrize("path", ["/api/v1/tools/call", "/callbacks/feishu/cli_x/", "/api/v1/sessions", "/login/"])
def test_a_declared_huge_body_is_refused_before_any_of_it_is_sent(served, path):
    sock = serving.raw_connection(served)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {HUGE}\r\n\r\n".encode()
    )
    assert _status_line(sock) == "HTTP/1.1 413 Request Entity Too Large"
    sock.close()


def test_a_streamed_body_is_cut_soon_after_the_limit(served):
    sock = serving.raw_connection(served)
    sock.sendall(b"POST /api/v1/tools/call HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    sent, deadline = 0, time.monotonic() + 20
    try:
        while sent < 40 * LIMIT and time.monotonic() < deadline:
            sock.sendall(b"%x\r\n%s\r\n" % (CHUNK, b"x" * CHUNK))
            sent += CHUNK
    except OSError:  # the server closed the connection: what we want
        pass
    # The kernel buffers a few MB either side; an unbounded server would have taken all 100 MB.
    assert sent < 10 * LIMIT, f"the server was still reading after {sent} bytes"
    sock.close()


def test_bodies_within_the_limit_are_served_as_before(served):
    near_limit = b'{"key": "' + b"k" * (LIMIT - 200) + b'"}'
    response = requests.post(f"{served}/api/v1/sessions", data=near_limit,
                             headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == 401  # read whole and refused for want of a key, not for its size
    assert requests.get(f"{served}/healthz", timeout=10).text == "ok"
