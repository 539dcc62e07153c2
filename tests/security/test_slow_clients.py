"""Issue 23, point 4, on a real ``manage.py serve``: slow clients are cut off
(askcards/http/serverguard.py). Before, a connection trickling a byte every few seconds stayed open for
ever on every route: a few hundred of them took every file descriptor, and ``/healthz``, the API and
the worker's lanes (a traceback a pass) all failed.

The servers here run with a 2 s header and 3 s body timeout and, for the storm, at most 256 open
files. Tricklers connect from 127.0.0.1 (the per-peer cap applies to them), ``/healthz`` is probed
from 127.0.0.2 (another peer, on the same loopback interface). Timings are asserted with margins:
the bound is what matters, not a speed."""
from __future__ import annotations

import asyncio
import http.client
import json
import re
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests import serving
from tests.mcp import support

HEADER_TIMEOUT, BODY_TIMEOUT = 2, 3
TIMEOUTS = {"ASKCARDS_HEADER_TIMEOUT": str(HEADER_TIMEOUT), "ASKCARDS_BODY_TIMEOUT": str(BODY_TIMEOUT)}
MARGIN = 3.0  # seconds a cut may come after its bound on a busy, shared machine
PROBE_FROM = "127.0.0.2"  # another peer address than the tricklers'
TRICKLE_EVERY = 0.5  # seconds between a trickler's bytes


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


@dataclass
class Trickler:
    """A client that starts a request and never finishes it: the headers (``kind`` "headers") or,
    after complete headers, the body ("body")."""

    kind: str
    path: str = "/healthz"
    sock: socket.socket = field(default_factory=socket.socket)
    started: float | None = None  # when its first byte (headers) or its complete headers (body) went out
    closed: float | None = None
    answer: bytes = b""

    def opening(self) -> bytes:
        if self.kind == "headers":
            return f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode()
        return (f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: 4000\r\n\r\n").encode()

    def status(self) -> int | None:
        match = re.match(rb"HTTP/1\.1 (\d{3}) ", self.answer)
        return int(match.group(1)) if match else None


def trickle(port: int, tricklers: list[Trickler], deadline: float) -> None:
    """Connect every trickler at once (non-blocking), then send each a byte every TRICKLE_EVERY s
    until the server closes it or ``deadline``; record when it was closed and what it was told."""
    connecting = {}
    for t in tricklers:
        t.sock.setblocking(False)
        t.sock.connect_ex(("127.0.0.1", port))
        connecting[t.sock] = t
    open_: dict[socket.socket, Trickler] = {}
    next_byte = time.monotonic()

    def close(t: Trickler) -> None:
        if t.closed is None:
            t.closed = time.monotonic()
        open_.pop(t.sock, None)
        connecting.pop(t.sock, None)

    while (connecting or open_) and time.monotonic() < deadline:
        readable, writable, _ = select.select(list(open_), list(connecting), [], 0.05)
        for sock in writable:
            t = connecting.pop(sock)
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                close(t)
                continue
            try:
                sock.send(t.opening())
            except OSError:
                close(t)
                continue
            t.started = time.monotonic()
            open_[sock] = t
        for sock in readable:
            t = open_[sock]
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if data:
                t.answer += data
            else:
                close(t)
        if time.monotonic() >= next_byte:
            next_byte = time.monotonic() + TRICKLE_EVERY
            for sock, t in list(open_.items()):
                try:
                    sock.send(b"a")
                except OSError:
                    close(t)
    for t in tricklers:
        t.sock.close()


def open_sockets(pid: int) -> int:
    """How many sockets the process has open now (its listening socket among them)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += fd.readlink().name.startswith("socket:")
        except OSError:  # closed while we looked
            pass
    return count


class Probe(threading.Thread):
    """GET /healthz from PROBE_FROM every 0.2 s on a fresh connection, until stopped; and how many
    sockets the server holds, each time."""

    def __init__(self, port: int, pid: int):
        super().__init__(daemon=True)
        self.port, self.pid, self.stopping = port, pid, threading.Event()
        self.results: list[tuple[float, int | str, float]] = []  # (when, status or error, seconds taken)
        self.sockets: list[int] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            self.sockets.append(open_sockets(self.pid))
            began = time.monotonic()
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5, source_address=(PROBE_FROM, 0))
            try:
                connection.request("GET", "/healthz")
                outcome: int | str = connection.getresponse().status
            except OSError as exc:
                outcome = type(exc).__name__
            finally:
                connection.close()
            self.results.append((began, outcome, time.monotonic() - began))
            self.stopping.wait(0.2)


def serveguard_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " askcards.http.serverguard " in line]


def wait_for_line(log: Path, needle: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if needle in log.read_text():
            return True
        time.sleep(0.2)
    return False


def test_hundreds_of_tricklers_are_cut_within_their_bounds_and_healthz_answers_throughout(tmp_path):
    env = {**serving.service_env(tmp_path), **TIMEOUTS}  # the default per-peer cap: 100
    serving.manage(env, "migrate", "-v0")
    # Interleaved, so each kind is among the first the server takes. The keyed route's body is
    # small (under ASKCARDS_PRE_AUTH_BODY_BYTES): read as it comes, then cut by the body timeout.
    tricklers = [kind for _ in range(100) for kind in (
        Trickler("headers"), Trickler("body", "/login/"), Trickler("body", "/api/v1/tools/call"))]
    with serving.serve_process(env, open_files=256) as (base, server):
        idle_sockets = open_sockets(server.pid)
        probe = Probe(port_of(base), server.pid)
        probe.start()
        time.sleep(0.5)
        began = time.monotonic()
        trickle(port_of(base), tricklers, deadline=began + 25)
        time.sleep(0.5)
        probe.stopping.set()
        probe.join(10)
        # Hundreds of cuts make a handful of lines: the first, then one summary per 10 s window.
        summarised = wait_for_line(tmp_path / "serve.log", "more connections refused or cut", 15)
    log = (tmp_path / "serve.log").read_text()

    assert all(t.closed is not None for t in tricklers), "a trickler was still open after 25 s"
    cut = [t for t in tricklers if t.status() == 408]
    refused = [t for t in tricklers if t.status() != 408]
    for t in cut:
        bound = HEADER_TIMEOUT if t.kind == "headers" else BODY_TIMEOUT
        assert t.started is not None and t.closed is not None
        assert bound - 0.3 <= t.closed - t.started <= bound + MARGIN, (t.kind, t.path, t.closed - t.started)
        assert b'"code": "request_timeout"' in t.answer
    assert {t.kind for t in cut} == {"headers", "body"} and {t.path for t in cut if t.kind == "body"} == {
        "/login/", "/api/v1/tools/call"}
    # The cap: the server never held more than 100 of 127.0.0.1's connections, plus the probe's and
    # those being refused at that instant. Twisted accepts a burst in batches (up to 100 per pass,
    # then 20 more each full pass) and a refused connection closes once its 503 is written, after
    # the batch: on a loaded machine a sample can catch most of a batch still open (53 seen on
    # CI). Without the cap all 300 tricklers are held. The rest were closed as they came (a 503
    # when it reached the client before the close).
    assert max(probe.sockets) <= idle_sockets + 100 + 120
    assert len(refused) >= 100
    for t in refused:
        assert t.status() in (503, None), t.answer[:100]
        assert t.started is None or t.closed - t.started <= 1.5 + MARGIN
    assert any(t.status() == 503 for t in refused)

    # /healthz, from another address, answered every time, throughout.
    assert len(probe.results) >= 10
    assert [outcome for _, outcome, _ in probe.results] == [200] * len(probe.results)
    assert max(taken for _, _, taken in probe.results) < 3

    assert "Traceback" not in log
    assert summarised, log[-2000:]
    assert len(serveguard_lines(tmp_path / "serve.log")) <= 6


def test_out_of_file_descriptors_the_worker_warns_once_and_everything_recovers(tmp_path):
    """With the cap off (ASKCARDS_PEER_CONNECTIONS=0), 300 tricklers take every descriptor of a
    128-file server (fewer than half of them, held at once, are enough even on a loaded machine):
    Twisted closes what it cannot accept, the worker's lanes back off with one warning, and once
    the tricklers are cut everything serves again by itself. The tricklers are cut after 10 s, not
    5: on a loaded machine taking every descriptor can itself take seconds, and the shortage must
    last past a few of the worker's 0.5 s ticks once it is reached."""
    env = {**serving.service_env(tmp_path), "ASKCARDS_HEADER_TIMEOUT": "10", "ASKCARDS_BODY_TIMEOUT": "10",
           "ASKCARDS_PEER_CONNECTIONS": "0"}
    serving.manage(env, "migrate", "-v0")
    tricklers = [Trickler("headers") for _ in range(300)]
    with serving.serve_process(env, open_files=128) as (base, _):
        time.sleep(1)  # the worker's lanes have run
        trickle(port_of(base), tricklers, deadline=time.monotonic() + 25)
        assert all(t.closed is not None for t in tricklers)
        answered = None
        for _ in range(50):  # bounded: 10 s
            try:
                answered = requests.get(f"{base}/healthz", timeout=2).status_code
                break
            except requests.ConnectionError:
                time.sleep(0.2)
        assert answered == 200
        resumed = wait_for_line(tmp_path / "serve.log", "file descriptors are available again", 40)
    log = (tmp_path / "serve.log").read_text()
    assert log.count("out of file descriptors") == 1, log[-3000:]
    assert resumed, log[-3000:]
    assert "Traceback" not in log
    assert sum(t.status() == 408 for t in tricklers) >= 50


def test_an_idle_connection_is_closed_after_its_bound(tmp_path):
    """A kept-alive connection may idle ASKCARDS_KEEPALIVE_TIMEOUT between requests (longer than
    the header timeout: clients' idle pools and proxies must close first, or a request sent as the
    server closes fails); past it, and past the header timeout for a connection that never sent a
    byte, the server closes the connection quietly."""
    keepalive = HEADER_TIMEOUT + 3
    env = {**serving.service_env(tmp_path), **TIMEOUTS, "ASKCARDS_KEEPALIVE_TIMEOUT": str(keepalive)}
    serving.manage(env, "migrate", "-v0")

    def healthz(sock) -> bytes:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok"):
            chunk = sock.recv(4096)
            assert chunk, f"the server closed the connection; got {answer!r}"
            answer += chunk
        return answer

    with serving.serve(env) as base:
        sock = serving.raw_connection(base)
        assert healthz(sock).startswith(b"HTTP/1.1 200 ")
        time.sleep(HEADER_TIMEOUT + 1)  # idle past the header timeout, within the keep-alive one
        assert healthz(sock).startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the server: quietly, no 408 on an idle connection
        assert keepalive - 0.3 <= time.monotonic() - answered <= keepalive + MARGIN
        sock.close()
        # A connection that never sends a byte is closed after the header timeout.
        sock = serving.raw_connection(base)
        opened = time.monotonic()
        assert sock.recv(4096) == b""
        assert HEADER_TIMEOUT - 0.3 <= time.monotonic() - opened <= HEADER_TIMEOUT + MARGIN
        sock.close()


def test_a_websocket_an_mcp_stream_and_a_long_poll_stay_open_past_the_timeouts(tmp_path):
    """Once the application has a request, its own rules end it: the panel socket, a blocking MCP
    call (an SSE stream) and a parked long-poll all outlive the 2 s and 3 s bounds, and the answer
    given on the socket 6 s later reaches both waiters."""
    with support.seeded(tmp_path, **TIMEOUTS) as (base, seed):
        cookie = support.login_cookie(base)
        headers = {"Authorization": f"Bearer {seed['key']}"}

        async def scenario():
            async with support.Panel.open(base, cookie) as panel, support.client(
                base, seed["key"], "session=slow-mcp&platform=web&web_user=alice"
            ) as mcp:
                call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": support.QUESTIONS}))
                shown = await panel.next_ask()
                ask_id = shown["requestId"]
                waited = asyncio.create_task(asyncio.to_thread(
                    requests.get, f"{base}/api/v1/asks/{ask_id}/wait?timeout=30", headers=headers, timeout=40))
                await asyncio.sleep(HEADER_TIMEOUT + BODY_TIMEOUT + 1)
                assert not call.done() and not waited.done()
                ack = await panel.answer(ask_id)  # support.QUESTIONS' first option
                result = await asyncio.wait_for(call, support.TIMEOUT)
                return ack, result, await asyncio.wait_for(waited, support.TIMEOUT)

        async def bounded():
            async with asyncio.timeout(60):
                return await scenario()

        ack, result, waited = asyncio.run(bounded())
        assert ack["ok"] is True
        assert result.is_error is False and json.loads(result.content[0].text)["answers"][0]["selectedLabels"] == [
            "PostgreSQL"]
        assert waited.status_code == 200 and waited.json()["status"] == "answered"
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
