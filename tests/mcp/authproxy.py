"""A local forwarding proxy that makes any MCP client an askcards agent: it adds the agent's
``Authorization: Bearer`` header and the URL's session query to every request.

The official conformance suite (tests/mcp/test_conformance.py) calls a bare URL with no
``Authorization`` header; askcards needs both. The proxy listens on 127.0.0.1 (a free port),
forwards every request to ``<base>/mcp?<query>`` with the client's own method, body and headers
(``Host`` and ``Origin`` too, so askcards' DNS-rebinding checks see what the client sent) plus the
key, and streams the response back as it arrives (SSE frames are not held back). Every forwarded
request is bounded by ``REQUEST_TIMEOUT``; the proxy runs in a thread of its own until the
``with`` block ends.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Iterator

import aiohttp
from aiohttp import web

REQUEST_TIMEOUT = 60  # seconds for one forwarded request, response stream included
START_TIMEOUT = 10
CLIENT = web.AppKey("client", aiohttp.ClientSession)
# Hop-by-hop headers (RFC 9110 §7.6.1) and what the proxy sets itself.
HOP_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    "content-length", "authorization",
})


def _forwardable(headers) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers.items() if name.lower() not in HOP_HEADERS]


def _app(target: str, key: str) -> web.Application:
    async def forward(request: web.Request) -> web.StreamResponse:
        session = request.app[CLIENT]
        headers = _forwardable(request.headers) + [("Authorization", f"Bearer {key}")]
        body = await request.read()
        async with session.request(request.method, target, headers=headers, data=body or None,
                                   allow_redirects=False, auto_decompress=False) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in _forwardable(upstream.headers):
                response.headers.add(name, value)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def client(app: web.Application):
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        # skip_auto_headers: aiohttp would otherwise add its own Accept / User-Agent / encodings.
        own_headers = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False, skip_auto_headers=own_headers) as s:
            app[CLIENT] = s
            yield

    app = web.Application(client_max_size=4 << 20)
    app.cleanup_ctx.append(client)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


@contextlib.contextmanager
def running(base: str, key: str, query: str) -> Iterator[str]:
    """The proxy for ``base``'s ``/mcp?<query>`` with agent ``key``; yields its URL
    (``http://127.0.0.1:<port>/mcp``)."""
    loop = asyncio.new_event_loop()
    started: dict[str, object] = {}
    ready = threading.Event()
    stop = asyncio.Event()

    async def main() -> None:
        runner = web.AppRunner(_app(f"{base}/mcp?{query}", key), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            started["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            await stop.wait()
        finally:
            await runner.cleanup()

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # shown to the test instead of a silent thread death
            started["error"] = exc
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="mcp-auth-proxy", daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT) or "error" in started:
        raise RuntimeError(f"the MCP auth proxy did not start: {started.get('error')!r}")
    try:
        yield f"http://127.0.0.1:{started['port']}/mcp"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(START_TIMEOUT)
