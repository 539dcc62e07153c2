"""The rules askcards/http/serverguard.py applies at the server (tested on a real server in
test_slow_clients.py and test_key_before_body.py): which routes are keyed, each route's body limit,
the refusal log that does not flood, and the settings, whose bad values stop the process with a
clear error."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from askcards.http import edge, serverguard
from tests.serving import ROOT


@pytest.mark.parametrize("path, keyed", [
    ("/api/v1/tools/call", True), ("/api/v1/asks/q_1/wait", True), ("/api/v1/no-such-endpoint", True),
    ("/mcp", True), ("/mcp/", False), ("/mcpx", False), ("/api/v1", False), ("/api/schema/", False),
    ("/api/docs/", False), ("/login/", False), ("/callbacks/feishu/cli_x/", False), ("/healthz", False),
])
def test_the_keyed_routes(path, keyed):
    assert edge.is_keyed(path) is keyed


def test_a_percent_encoded_path_is_judged_as_the_application_will_route_it():
    class Channel:
        _path = b"/api%2Fv1/tools/call?session=x"

    assert serverguard.request_path(Channel()) == "/api/v1/tools/call"
    assert edge.is_keyed(serverguard.request_path(Channel()))


def test_each_routes_body_limit(settings):
    assert edge.body_limit("/api/v1/tools/call") == settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2_621_440
    assert edge.body_limit("/callbacks/feishu/cli_x/") == 1024 * 1024
    assert edge.body_limit("/callbacks/dingtalk/ding_x/") == 1024 * 1024
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    assert edge.body_limit("/callbacks/feishu/cli_x/") == 1000  # never above the global limit


def test_the_refusal_log_writes_the_first_line_then_one_summary_a_window(caplog):
    now, scheduled = [100.0], []
    log = serverguard.RefusalLog(window=10, clock=lambda: now[0], call_later=lambda delay, fn: scheduled.append(
        (delay, fn)) or object())
    caplog.set_level(logging.WARNING, logger="askcards.http.serverguard")
    log.note("408 headers too slow", "cut a connection from 10.0.0.1: 408", "10.0.0.1")
    for i in range(300):
        now[0] += 0.01
        log.note("408 headers too slow" if i % 3 else "503 over the per-peer cap", "not logged", f"10.0.0.{i % 7}")
    assert [r.getMessage() for r in caplog.records] == ["cut a connection from 10.0.0.1: 408"]
    assert len(scheduled) == 1  # one flush for the whole window
    delay, flush = scheduled[0]
    assert 9.9 < delay <= 10  # when the window that the first line opened ends
    now[0] = 110.0
    flush()
    assert caplog.records[-1].getMessage() == (
        "300 more connections refused or cut in the last 10 s (408 headers too slow: 200, 503 over the per-peer cap: "
        "100) from 7 address(es)")
    now[0] += 60
    log.note("401 bad key", "refused POST /mcp from 10.0.0.1: 401 invalid_key", "10.0.0.1")
    assert caplog.records[-1].getMessage() == "refused POST /mcp from 10.0.0.1: 401 invalid_key"
    assert all(record.exc_info is None for record in caplog.records)


def test_the_answers_are_whole_http_responses_in_the_api_error_shape():
    raw = serverguard.answer(401, "invalid_key", "Invalid agent key.", ("www-authenticate", "Bearer"))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 401 Unauthorized"
    assert b"content-length: %d" % len(body) in head and b"connection: close" in head
    assert body == b'{"error": {"code": "invalid_key", "message": "Invalid agent key."}}'


@pytest.mark.parametrize("name, value, says", [
    ("ASKCARDS_HEADER_TIMEOUT", "0", "ASKCARDS_HEADER_TIMEOUT must be >= 1, got 0"),
    ("ASKCARDS_BODY_TIMEOUT", "soon", "ASKCARDS_BODY_TIMEOUT must be an integer, got 'soon'"),
    ("ASKCARDS_KEEPALIVE_TIMEOUT", "3601", "ASKCARDS_KEEPALIVE_TIMEOUT must be <= 3600, got 3601"),
    ("ASKCARDS_PEER_CONNECTIONS", "-1", "ASKCARDS_PEER_CONNECTIONS must be >= 0, got -1"),
    ("ASKCARDS_PRE_AUTH_BODY_BYTES", "9999999", "ASKCARDS_PRE_AUTH_BODY_BYTES must be <= 1048576, got 9999999"),
])
def test_a_bad_setting_stops_the_process_with_a_clear_error(tmp_path, name, value, says):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", "ASKCARDS_DATA_DIR": str(tmp_path), name: value}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and says in done.stderr
