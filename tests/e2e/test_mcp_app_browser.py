"""The MCP App in a real browser (Debian's Chromium, Playwright): a host page built on the ext-apps
package's ``AppBridge`` and the MCP TypeScript client (tests/e2e/mcp_app, pinned by its
package-lock.json, loaded from node_modules with an import map: no build) connects to a real
``serve`` over MCP, declaring ``io.modelcontextprotocol/ui``, through a small proxy of this test's
that adds the agent's Bearer key. It calls ``ask_user_questions`` as a model would and renders the
tool's ``ui://`` resource in a sandboxed iframe under the spec's restrictive CSP.

- A person answers in the iframe, on each protocol era: the blocking call returns that answer, the
  app says it reached the agent, and the web panel — the other surface — says the question was
  answered elsewhere and lists it as answered in the MCP App.
- A race: answered on the panel first, the app's form (its result held back by the host) submits
  late, says it was answered elsewhere, and the agent keeps the panel's answer.

Screenshots: ``tests/artifacts/mcp-app-question.png`` (filled in) and ``mcp-app-answered.png``.
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
import requests

from tests import npm, serving
from tests.conftest import require
from tests.e2e.test_panel_browser import QUESTIONS, SEED, _sign_in, browser_page, chromium_path  # noqa: F401

HOST_DIR = Path(__file__).resolve().parent / "mcp_app"
ARTIFACTS = serving.ROOT / "tests" / "artifacts"
SESSION_QUERY = "session=web%2Falice&platform=web&web_user=alice"
PROXY_TIMEOUT = 120  # seconds a proxied MCP exchange may last (the blocking call waits on the person)
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
                 ".json": "application/json"}


@pytest.fixture(scope="module")
def node_modules():
    why = npm.ci(HOST_DIR, lambda: (HOST_DIR / "node_modules" / "@modelcontextprotocol" / "ext-apps").is_dir(),
                 what="the MCP Apps host packages")
    require(not why, why)
    return HOST_DIR / "node_modules"


class HostServer:
    """The host page, its packages, and ``/mcp`` proxied to askcards with the Bearer key (the key
    stays out of the page, as a real host keeps its credentials). Listens on 127.0.0.1."""

    def __init__(self, askcards: str, key: str):
        target = urlsplit(askcards)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one exchange per connection: a streamed body ends with it

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                if self.path.split("?")[0] == "/mcp":
                    return self.proxy()
                path = self.path.split("?")[0].lstrip("/") or "host.html"
                file = (HOST_DIR / path).resolve()
                if HOST_DIR not in file.parents or not file.is_file() or file.suffix not in CONTENT_TYPES:
                    self.send_error(404)
                    return
                body = file.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPES[file.suffix])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.proxy()

            def do_DELETE(self):
                self.proxy()

            def proxy(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {name: value for name, value in self.headers.items()
                           if name.lower() not in ("host", "origin", "referer", "connection", "content-length", "cookie")}
                headers["Authorization"] = f"Bearer {key}"
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=PROXY_TIMEOUT)
                try:
                    connection.request(self.command, f"/mcp?{SESSION_QUERY}", body=body, headers=headers)
                    answer = connection.getresponse()
                    self.send_response(answer.status)
                    for name, value in answer.getheaders():
                        if name.lower() not in ("connection", "transfer-encoding", "content-length", "date", "server"):
                            self.send_header(name, value)
                    self.end_headers()
                    outer.exchanges.append((self.command, answer.status, answer.getheader("mcp-session-id")))
                    while chunk := answer.read1(65536):  # streamed as it comes (SSE), until askcards ends it
                        self.wfile.write(chunk)
                        self.wfile.flush()
                finally:
                    connection.close()

        self.exchanges: list[tuple[str, int, str | None]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HostServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service(tmp_path, node_modules):
    with serving.seeded(tmp_path, SEED) as (base, seed):
        with HostServer(base, seed["key"]) as host:
            yield base, {"Authorization": f"Bearer {seed['key']}"}, host


def _host_state(page, *states: str, timeout: float = 30) -> dict:
    """window.host once it reaches one of ``states`` (bounded; a failure in the page fails here)."""
    deadline = time.monotonic() + timeout
    while True:
        host = page.evaluate("() => window.host ? JSON.parse(JSON.stringify(window.host)) : null")
        assert not (host and host.get("error")), host["error"]
        if host and host["state"] in states:
            return host
        assert time.monotonic() < deadline, f"the host page is still {host and host['state']!r}: {page.problems}"
        page.wait_for_timeout(100)


def _open_host(browser, host: HostServer, era: str, *, hold: bool = False):
    page = browser.new_page(locale="zh-CN", viewport={"width": 900, "height": 1000})
    page.set_default_timeout(10_000)
    page.problems = []  # what the page's console and loader reported, for a failure's message
    page.on("console", lambda message: message.type in ("error", "warning") and page.problems.append(message.text))
    page.on("pageerror", lambda error: page.problems.append(str(error)))
    query = f"era={era}&questions={quote(json.dumps(QUESTIONS))}" + ("&hold=1" if hold else "")
    page.goto(f"{host.base}/host.html?{query}")
    shown = _host_state(page, "shown")
    return page, shown


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_person_answers_in_the_hosts_app_and_the_agent_gets_it(era, service, browser_page):
    base, headers, host = service
    panel = browser_page
    _sign_in(panel, base)

    page, shown = _open_host(panel.context.browser, host, era)
    # The model is shown only its tool; the app's two tools are the app's.
    assert shown["modelTools"] == ["ask_user_questions"]
    assert set(shown["allTools"]) == {"ask_user_questions", "askcards_app_ask", "askcards_app_answer"}
    assert (shown["uri"], shown["mimeType"]) == ("ui://askcards/ask.html", "text/html;profile=mcp-app")
    if era == "legacy":  # the handshake era: initialize answered with the session id that records Apps
        assert any(method == "POST" and session for method, _, session in host.exchanges)

    app = page.frame_locator("#app")
    app.get_by_role("radio", name="PostgreSQL").wait_for()
    assert app.get_by_text("Relational, runs as a server").is_visible()  # the option's description
    assert app.get_by_text("可多选").is_visible() and app.get_by_text("单选").is_visible()
    app.get_by_role("heading", name="browser-test").wait_for()  # who asks, as on the panel (once found)
    # The same ask waits on the panel, the other surface.
    waiting = panel.locator("section.ask:not(.done)")
    waiting.get_by_role("radio", name="PostgreSQL").wait_for()
    ask_id = waiting.get_attribute("data-request-id")

    # The Feishu rule, as on the panel: each question needs a choice or words.
    app.get_by_role("button", name="提交").click()
    assert app.get_by_text("请至少选择一项或填写其他").count() == 2
    app.get_by_role("radio", name="SQLite").check()
    app.get_by_role("checkbox", name="Feishu").check()
    app.get_by_role("checkbox", name="Web").check()
    app.locator("textarea").nth(1).fill("还有微信")
    if era == "legacy":
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "mcp-app-question.png"), full_page=True)
    app.get_by_role("button", name="提交").click()

    returned = _host_state(page, "returned", "result sent")
    result = returned["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["status"] == "answered"
    assert json.loads(result["content"][0]["text"])["answers"] == [
        {"question": QUESTIONS[0]["question"], "selectedLabels": ["SQLite"], "customInput": None},
        {"question": QUESTIONS[1]["question"], "selectedLabels": ["Feishu", "Web"], "customInput": "还有微信"},
    ]
    assert result["structuredContent"]["ask"]["id"] == ask_id
    assert returned["appCalls"][-1] == "askcards_app_answer" and returned["refused"] == []
    # The app: its answer reached the agent (the call's result came back), and what was answered.
    app.get_by_text("已提交，回答已送达。").wait_for()
    assert app.get_by_text("Feishu、Web、还有微信").is_visible()
    assert app.locator("form").count() == 0

    # The other surfaces: the ask's record names the app; the panel closes the form and says so.
    record = requests.get(f"{base}/api/v1/asks/{ask_id}", headers=headers, timeout=10).json()
    assert [r["surface"] for r in record["respondents"]] == ["host_app"]
    panel.locator(f'[data-request-id="{ask_id}"]').get_by_text("已在 MCP 应用回答。").wait_for()
    panel.locator(f'[data-history-id="{ask_id}"]').get_by_text("已回答（MCP 应用）").wait_for()
    if era == "legacy":
        page.screenshot(path=str(ARTIFACTS / "mcp-app-answered.png"), full_page=True)


def test_answered_on_the_panel_first_the_app_says_so_and_its_late_submit_changes_nothing(service, browser_page):
    base, headers, host = service
    panel = browser_page
    _sign_in(panel, base)
    page, _ = _open_host(panel.context.browser, host, "legacy", hold=True)
    app = page.frame_locator("#app")
    app.get_by_role("radio", name="PostgreSQL").check()  # the form is filled in the host...
    app.get_by_role("checkbox", name="DingTalk").check()

    waiting = panel.locator("section.ask:not(.done)")  # ...and answered on the panel first
    ask_id = waiting.get_attribute("data-request-id")
    waiting.get_by_role("radio", name="SQLite").check()
    waiting.get_by_role("checkbox", name="Web").check()
    waiting.get_by_role("button", name="提交").click()
    waiting_done = panel.locator(f'[data-request-id="{ask_id}"]')
    waiting_done.get_by_text("已提交").first.wait_for()
    returned = _host_state(page, "returned")  # the call returned the panel's answer; the app not told yet
    assert returned["result"]["structuredContent"]["ask"]["respondents"][0]["surface"] == "web"

    app.get_by_role("button", name="提交").click()  # the late submit
    app.get_by_text("已在其他地方作答。").wait_for()
    assert app.locator("form").count() == 0
    record = requests.get(f"{base}/api/v1/asks/{ask_id}", headers=headers, timeout=10).json()
    assert [r["surface"] for r in record["respondents"]] == ["web"]
    assert record["result"]["answers"][0]["selectedLabels"] == ["SQLite"]

    page.evaluate("() => window.host.release()")  # the host hands the result over at last
    _host_state(page, "result sent")
    assert app.get_by_text("已在其他地方作答。").is_visible()
