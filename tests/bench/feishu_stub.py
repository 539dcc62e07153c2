"""A tiny Feishu OpenAPI stand-in for the callback benchmark: 127.0.0.1 only, always succeeds.

    python -m tests.bench.feishu_stub [--port 0]

It prints ``listening <port>`` once it accepts connections, then answers, without checking
anything (the strict fake in ``tests/fakes/feishu.py`` is for tests that check cards):

- ``POST /open-apis/auth/v3/tenant_access_token/internal``: a token valid for 2 h;
- ``POST /open-apis/im/v1/messages`` (send) and ``POST …/messages/{id}/reply``:
  ``{"code": 0, "data": {"message_id": "om_stub_<n>", "chat_id": "oc_stub"}}``;
- ``PATCH /open-apis/im/v1/messages/{id}``: ``{"code": 0, "data": {}}``;
- ``GET /stats``: how many of each it answered (the benchmark reads it between phases).

Anything else gets HTTP 404 with a Feishu-like error body. It runs until SIGTERM / SIGINT.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
from collections import Counter

from aiohttp import web

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/open-apis/im/v1/messages"


def build_app() -> web.Application:
    counts: Counter[str] = Counter()
    ids = itertools.count(1)

    async def token(request: web.Request) -> web.Response:
        await request.read()
        counts["token"] += 1
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": "t-bench-stub", "expire": 7200})

    async def send(request: web.Request) -> web.Response:
        await request.read()
        counts["send"] += 1
        return web.json_response({"code": 0, "msg": "success",
                                  "data": {"message_id": f"om_stub_{next(ids)}", "chat_id": "oc_stub"}})

    async def reply(request: web.Request) -> web.Response:
        await request.read()
        counts["reply"] += 1
        return web.json_response({"code": 0, "msg": "success",
                                  "data": {"message_id": f"om_stub_{next(ids)}", "chat_id": "oc_stub"}})

    async def patch(request: web.Request) -> web.Response:
        await request.read()
        counts["patch"] += 1
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(dict(counts))

    async def other(request: web.Request) -> web.Response:
        await request.read()
        counts["unknown"] += 1
        message = f"stub: no route {request.method} {request.path}"
        return web.json_response({"code": 99991400, "msg": message}, status=404)

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post(TOKEN_PATH, token)
    app.router.add_post(MESSAGES_PATH, send)
    app.router.add_post(MESSAGES_PATH + "/{message_id}/reply", reply)
    app.router.add_patch(MESSAGES_PATH + "/{message_id}", patch)
    app.router.add_get("/stats", stats)
    app.router.add_route("*", "/{tail:.*}", other)
    return app


async def serve(port: int) -> None:
    runner = web.AppRunner(build_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    actual = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening {actual}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
