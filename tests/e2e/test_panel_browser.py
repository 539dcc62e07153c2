"""The web panel in a real browser: Debian's Chromium, driven by Playwright, against ``serve``.

A person signs in, sees an ask pushed live, is stopped by the Feishu rule when a question is
left blank, sees an ask the agent cancelled say so, answers another, and the agent's long-poll
(``tools/call`` with ``wait``) returns exactly that answer. A screenshot of the answered panel is
saved to ``tests/artifacts/panel-answered.png`` (and the filled form to ``panel-question.png``).

A DingTalk form (several field types, defaults, required, a hidden field) of a session naming
alice as its granted web user is answered in the page, with the card delivered to a fake DingTalk
server as well; the agent reads the answer as the ask's message (a 1,234-character, 600-line note
whole), the card's update shows it shortened, and the page's history keeps it (shortened too).
Screenshots: ``panel-dingtalk-form.png`` (filled in) and ``panel-dingtalk-history.png``.
"""
from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import requests

from tests import serving
from tests.conftest import require

ARTIFACTS = serving.ROOT / "tests" / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
UI_TIMEOUT_MS = 10_000
PAGE = 20  # asks the panel shows at once (the default ASKCARDS_PANEL_PAGE)

SEED = """
from django.contrib.auth import get_user_model
from django.core.management import call_command
get_user_model().objects.create_user("alice", password="correct horse battery")  # not staff
# As the README's walkthrough does: the agent is granted alice, whose panel it then asks.
call_command("askcards_agent", "create", "browser-test", "--grant", "alice", "--json")
"""

QUESTIONS = [
    {
        "question": "Which database should we use?",
        "header": "Database",
        "options": [{"label": "PostgreSQL", "description": "Relational, runs as a server"}, {"label": "SQLite", "description": "Embedded file"}],
    },
    {
        "question": "Which platforms must we support?",
        "header": "Platforms",
        "multiSelect": True,
        "options": [{"label": "Feishu"}, {"label": "DingTalk"}, {"label": "Web", "description": "This panel"}],
    },
]


def chromium_path() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path:
        return path
    require(False, "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)")


@pytest.fixture
def service(tmp_path):
    with serving.seeded(tmp_path, SEED) as (base, seed):
        yield base, {"Authorization": f"Bearer {seed['key']}"}


@pytest.fixture
def browser_page():
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(locale="zh-CN", viewport={"width": 900, "height": 1400})
            page.set_default_timeout(UI_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def _call(base, headers, session_id, *, wait=0):
    body = {"session": session_id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}, "wait": wait}
    response = requests.post(f"{base}/api/v1/tools/call", json=body, headers=headers, timeout=wait + 10)
    assert response.status_code == 200, response.text
    return response.json()


def test_person_answers_in_the_browser_and_the_agent_gets_it(service, browser_page):
    base, headers = service
    page = browser_page

    # Sign in (a plain, non-staff account) and land on the panel, connected.
    page.goto(f"{base}/panel/")
    assert page.url.startswith(f"{base}/login/")
    page.get_by_label("用户名").fill("alice")
    page.get_by_label("密码").fill("correct horse battery")
    page.get_by_role("button", name="登录").click()
    page.wait_for_url(f"{base}/panel/")
    page.locator('#connection[data-state="open"]').wait_for()
    assert page.get_by_text("暂无待回答的问题").is_visible()

    session = requests.post(
        f"{base}/api/v1/sessions", json={"key": "web/alice", "platform": "web", "web_user": "alice"}, headers=headers, timeout=10
    ).json()

    # An ask the agent then cancels: pushed live, then the page says so in words.
    cancelled = _call(base, headers, session["id"])
    assert cancelled["status"] == "pending"
    first = page.locator(f'[data-request-id="{cancelled["ask"]["id"]}"]')
    first.get_by_role("radio", name="PostgreSQL").wait_for()
    assert requests.post(f"{base}/api/v1/asks/{cancelled['ask']['id']}/cancel", json={}, headers=headers, timeout=10).status_code == 200
    first.get_by_text("提问已被智能体取消。").wait_for()
    assert first.locator("form").count() == 0

    # An ask the agent waits for (a long-poll held open by the server while the person answers).
    waited: dict = {}
    waiter = threading.Thread(target=lambda: waited.update(_call(base, headers, session["id"], wait=45)))
    waiter.start()
    open_ask = page.locator("section.ask:not(.done)")
    open_ask.get_by_role("radio", name="PostgreSQL").wait_for()
    ask_id = open_ask.get_attribute("data-request-id")
    second = page.locator(f'[data-request-id="{ask_id}"]')
    assert page.title().startswith("(1) ")
    assert page.locator("#announce").text_content() == "新问题：Database、Platforms"
    assert second.get_by_text("Relational, runs as a server").is_visible()

    # The Feishu rule: each question needs a selection or text; nothing is sent until then.
    second.get_by_role("button", name="提交").click()
    assert second.get_by_text("请至少选择一项或填写其他").count() == 2
    second.get_by_role("radio", name="SQLite").check()  # answering a question clears its message
    assert second.get_by_text("请至少选择一项或填写其他").count() == 1
    second.get_by_role("button", name="提交").click()
    assert second.get_by_text("请至少选择一项或填写其他").count() == 1
    assert requests.get(f"{base}/api/v1/asks/{ask_id}", headers=headers, timeout=10).json()["status"] == "pending"

    # Answer: single select by option, multi select with options and the "other" box together.
    second.get_by_role("radio", name="PostgreSQL").check()
    platforms = second.get_by_role("group", name="Platforms Which platforms must we support?")
    platforms.get_by_role("checkbox", name="Feishu").check()
    platforms.get_by_role("checkbox", name="Web").check()
    platforms.get_by_label("其他（可选）").fill("  WeCom later  ")
    # The box holds as much as the server accepts of one answer (tools.ANSWER_TEXT_MAX_CHARS).
    assert platforms.get_by_label("其他（可选）").get_attribute("maxlength") == "10000"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel-question.png"), full_page=True)
    second.get_by_role("button", name="提交").click()
    second.get_by_text("已提交，回答已送达。").wait_for()
    # The page keeps what the person answered; a single select's own words replace its option.
    assert second.locator(".summary dd").all_inner_texts() == ["PostgreSQL", "Feishu、Web、WeCom later"]

    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert waited["status"] == "answered" and waited["ask"]["id"] == ask_id
    assert json.loads(waited["tool_result"]) == {
        "answers": [
            {"question": "Which database should we use?", "selectedLabels": ["PostgreSQL"], "customInput": None},
            {"question": "Which platforms must we support?", "selectedLabels": ["Feishu", "Web"], "customInput": "WeCom later"},
        ]
    }
    assert page.get_by_text("暂无待回答的问题").is_visible()
    page.screenshot(path=str(ARTIFACTS / "panel-answered.png"), full_page=True)

    # An ask nobody waits on: answered, the page claims no delivery until the agent reads it.
    unread = _call(base, headers, session["id"])["ask"]["id"]
    third = page.locator(f'[data-request-id="{unread}"]')
    third.get_by_role("radio", name="SQLite").check()
    third.get_by_role("group", name="Platforms Which platforms must we support?").get_by_role("checkbox", name="Web").check()
    third.get_by_role("button", name="提交").click()
    third.get_by_text("已提交。", exact=True).wait_for()
    time.sleep(0.5)
    assert third.get_by_text("已提交，回答已送达。").count() == 0
    assert requests.get(f"{base}/api/v1/asks/{unread}", headers=headers, timeout=10).json()["status"] == "answered"
    time.sleep(0.5)
    assert third.get_by_text("已提交，回答已送达。").count() == 0  # a GET only reads
    taken = requests.post(f"{base}/api/v1/asks/{unread}/wait", json={"timeout": 0}, headers=headers, timeout=10)
    assert taken.json()["status"] == "answered"
    third.get_by_text("已提交，回答已送达。").wait_for()  # the agent took the result

    # A reload shows nothing pending: the state lives on the server.
    page.reload()
    page.locator('#connection[data-state="open"]').wait_for()
    assert page.locator("section.ask").count() == 0


# ------------------------------------------------------------------------------ DingTalk forms

DINGTALK_SEED = """
from django.contrib.auth import get_user_model
from django.core.management import call_command
from askcards import services
get_user_model().objects.create_user("alice", password="correct horse battery")
services.bot_add(platform="dingtalk", app_id={app_id!r}, app_secret={secret!r}, base_url={base_url!r},
                 api_secret="callback-api-secret", callback_mode="stream")
call_command("askcards_agent", "create", "lunch-bot", "--grant", "alice", "--bot", {app_id!r}, "--json")
"""

LONG_NOTE = "\n".join(["这一行稍长些"] * 7 + ["短"] * 593)  # 1,234 characters, 600 lines
MARK = "…（已截断，完整回答已记录）"
LUNCH = [{"value": "rice", "text": "米饭"}, {"value": "noodles", "text": "面条"}, {"value": "dumplings", "text": "饺子"}]
FORM_FIELDS = [
    {"name": "code", "label": "代号", "type": "TEXT", "required": True, "placeholder": "例如 DM-1"},
    {"name": "count", "label": "人数", "type": "NUMBER", "required": True},
    {"name": "dish", "label": "主食", "type": "SELECT", "options": LUNCH, "defaultValue": {"index": 1, "value": "noodles"}},
    {"name": "sides", "label": "配菜", "type": "MULTI_CHECKBOX_GROUP", "options": LUNCH},
    {"name": "drink", "label": "饮料", "type": "CHECKBOX_GROUP", "required": True,
     "options": [{"value": "tea", "text": "茶"}, {"value": "water", "text": "水"}]},
    {"name": "day", "label": "日期", "type": "DATE"},
    {"name": "at", "label": "时间", "type": "TIME"},
    {"name": "spicy", "label": "要辣", "type": "SWITCH", "defaultValue": True},
    {"name": "tags", "label": "忌口", "type": "TEXT_ARRAY", "addText": "再加一项"},
    {"name": "note", "label": "备注", "type": "TEXT_AREA", "defaultValue": "无"},
    {"name": "trace", "label": "追踪", "type": "TEXT", "hidden": True, "defaultValue": "t-42"},
]


@pytest.fixture
def dingtalk_service(tmp_path):
    from tests.fakes.dingtalk import FakeDingTalk

    with FakeDingTalk() as fake:
        seed_code = DINGTALK_SEED.format(app_id=fake.client_id, secret=fake.client_secret, base_url=fake.base_url)
        with serving.seeded(tmp_path, seed_code) as (base, seed):
            yield base, {"Authorization": f"Bearer {seed['key']}"}, fake


def _sign_in(page, base):
    page.goto(f"{base}/panel/")
    page.get_by_label("用户名").fill("alice")
    page.get_by_label("密码").fill("correct horse battery")
    page.get_by_role("button", name="登录").click()
    page.wait_for_url(f"{base}/panel/")
    page.locator('#connection[data-state="open"]').wait_for()


def test_person_answers_a_dingtalk_form_in_the_browser_and_the_agent_gets_it(dingtalk_service, browser_page):
    base, headers, fake = dingtalk_service
    page = browser_page
    _sign_in(page, base)
    # The page and its favicon (served from our static files).
    icon = page.locator('link[rel="icon"]').get_attribute("href")
    favicon = requests.get(f"{base}{icon}", timeout=10)
    assert favicon.status_code == 200 and favicon.headers["Content-Type"].startswith("image/svg+xml")

    session = requests.post(f"{base}/api/v1/sessions", headers=headers, timeout=10, json={
        "key": "dingtalk/dm/staff_a", "platform": "dingtalk", "bot": fake.client_id, "chat_type": "p2p",
        "user_id": "staff_a", "user_name": "成员甲", "web_user": "alice",
    })
    assert session.status_code in (200, 201), session.text
    called = requests.post(f"{base}/api/v1/tools/call", headers=headers, timeout=10, json={
        "session": session.json()["id"], "name": "dingtalk_ask_user_question",
        "arguments": {"title": "午餐登记", "description": "周五团建的午餐", "fields": FORM_FIELDS},
    }).json()
    assert called["status"] == "pending", called
    ask_id = called["ask"]["id"]
    assert len(fake.cards) == 1  # the card went out as well

    section = page.locator(f'[data-request-id="{ask_id}"]')
    section.get_by_role("heading", name="午餐登记").wait_for()
    # Who asks, in words: the agent and the conversation, never the session's s_… id.
    assert section.get_by_role("heading", level=2).inner_text() == "lunch-bot"
    meta = section.locator(".meta").inner_text()
    assert meta.startswith("钉钉私聊：成员甲 · 截止 ") and "s_" not in section.inner_text()
    assert section.get_by_text("周五团建的午餐").is_visible()
    # Defaults are filled in; the hidden field is not shown.
    assert section.get_by_label("主食").evaluate("select => select.selectedOptions[0].text") == "面条"
    assert section.get_by_role("switch", name="要辣").is_checked()
    assert section.get_by_label("备注").input_value() == "无"
    assert section.get_by_text("追踪").count() == 0

    # Required fields are asked for before anything is sent.
    section.get_by_role("button", name="提交").click()
    section.get_by_text("请填写「代号」。").wait_for()
    assert section.get_by_text("请选择「饮料」。").is_visible()
    assert requests.get(f"{base}/api/v1/asks/{ask_id}", headers=headers, timeout=10).json()["status"] == "pending"

    section.get_by_label("代号").fill("DM-7")
    section.get_by_label("人数").fill("12")
    section.get_by_label("主食").select_option(label="饺子")
    sides = section.get_by_role("group", name="配菜")
    sides.get_by_role("checkbox", name="米饭").check()
    sides.get_by_role("checkbox", name="面条").check()
    section.get_by_role("group", name="饮料", exact=True).get_by_role("radio", name="茶").check()
    section.get_by_label("日期").fill("2026-12-04")
    section.get_by_label("时间").fill("12:30")
    section.get_by_role("switch", name="要辣").uncheck()
    tags = section.get_by_role("group", name="忌口")
    tags.get_by_label("忌口 第 1 项").fill("香菜")
    tags.get_by_role("button", name="再加一项").click()
    tags.get_by_label("忌口 第 2 项").fill("花生")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "panel-dingtalk-form.png"), full_page=True)
    section.get_by_label("备注").fill(LONG_NOTE)  # a long answer, as a person writes one
    section.get_by_role("button", name="提交").click()
    section.get_by_text("你已提交。").wait_for()
    assert section.locator(".summary dt").all_inner_texts()[:3] == ["代号", "人数", "主食"]

    # The agent reads the answer as the message it injects as a new user turn (reference §9).
    ask = requests.get(f"{base}/api/v1/asks/{ask_id}", headers=headers, timeout=10).json()
    assert (ask["status"], ask["reason"]) == ("answered", "submitted")
    assert [r["surface"] for r in ask["respondents"]] == ["web"]
    message = ask["result"]["message"]
    assert message.startswith("用户回答了交互卡片:\n")
    for line in ("  - 代号: DM-7", "  - 人数: 12", "  - 主食: 饺子", "  - 配菜: 米饭, 面条", "  - 饮料: 茶",
                 "  - 日期: 2026-12-04", "  - 时间: 12:30", "  - 要辣: false", "  - 忌口: 香菜, 花生",
                 "  - 追踪: t-42"):
        assert line in message.split("\n"), (line, message)
    assert f"  - 备注: {LONG_NOTE}\n" in message  # whole, every line of it
    closed = [e for e in requests.get(f"{base}/api/v1/events?after=0", headers=headers, timeout=10).json()["events"]
              if e["type"] == "ask.closed"]
    assert [e["data"]["ask"]["result"]["message"] for e in closed] == [message]

    # The card shows it shortened to DingTalk's ~1 KB per value (the worker's PUT).
    card = next(iter(fake.cards.values()))
    deadline = time.monotonic() + 10
    while card.params.get("card_status") != "submitted" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert card.params["card_status"] == "submitted"
    assert all(len(value.encode()) <= 1000 for value in card.updates[-1].values())
    assert card.params["selected_text"].endswith(MARK)

    # The history keeps it with the answers (the long one shortened); a reload shows it again,
    # and nothing pending.
    history = page.locator(f'#history-list [data-history-id="{ask_id}"]')
    history.get_by_text("已回答（网页）").wait_for()
    assert any(text.endswith(MARK) for text in history.locator("dd").all_inner_texts())
    page.reload()
    page.locator('#connection[data-state="open"]').wait_for()
    assert page.locator("section.ask").count() == 0
    history.get_by_text("DM-7").wait_for()
    assert history.get_by_text("lunch-bot · 钉钉私聊：成员甲").is_visible()
    page.screenshot(path=str(ARTIFACTS / "panel-dingtalk-history.png"), full_page=True)


# ------------------------------------------------------------------------------ many waiting asks

def test_a_person_with_many_waiting_asks_sees_a_page_and_how_many_more(service, browser_page):
    base, headers = service
    page = browser_page
    _sign_in(page, base)
    session = requests.post(
        f"{base}/api/v1/sessions", json={"key": "web/alice", "platform": "web", "web_user": "alice"}, headers=headers, timeout=10
    ).json()
    asks = [_call(base, headers, session["id"])["ask"]["id"] for _ in range(PAGE + 3)]

    # The oldest page of them, and how many more wait.
    page.get_by_text("还有 3 个问题等待回答").wait_for()
    shown = page.locator("section.ask")
    assert shown.evaluate_all("nodes => nodes.map(node => node.dataset.requestId)") == asks[:PAGE]
    assert page.title().startswith(f"({PAGE + 3}) ")

    # One on the page is answered elsewhere: the next one comes in, and the count goes down.
    assert requests.post(f"{base}/api/v1/asks/{asks[0]}/cancel", json={}, headers=headers, timeout=10).status_code == 200
    page.locator(f'[data-request-id="{asks[PAGE]}"]').get_by_role("radio", name="PostgreSQL").wait_for()
    page.get_by_text("还有 2 个问题等待回答").wait_for()

    # A reload shows the page again, not all of them.
    page.reload()
    page.locator('#connection[data-state="open"]').wait_for()
    page.get_by_text("还有 2 个问题等待回答").wait_for()
    assert page.locator("section.ask").evaluate_all("nodes => nodes.map(node => node.dataset.requestId)") == asks[1:PAGE + 1]


# ------------------------------------------------------------------ withdrawn: nobody waits any more

def test_an_ask_nobody_waits_for_any_more_says_why_on_the_page(tmp_path, browser_page):
    """A Claude Code prompt whose hook request closes (answered in the terminal, timed out) and an
    MCP call whose client went away for good: each leaves alice's page with the words saying why,
    as the Feishu and DingTalk cards say it (tests/hosts/test_withdrawn_reasons.py)."""
    import asyncio
    import contextlib

    from mcp import MCPError

    from tests.mcp import support

    with support.seeded(tmp_path, ASKCARDS_MCP_CALLER_GRACE_SECONDS="2") as (base, seed):
        page = browser_page
        page.goto(f"{base}/panel/")
        page.get_by_label("用户名").fill("alice")
        page.get_by_label("密码").fill("pw")
        page.get_by_role("button", name="登录").click()
        page.wait_for_url(f"{base}/panel/")
        page.locator('#connection[data-state="open"]').wait_for()

        # Claude Code's PermissionRequest hook, as its http hook posts it; then the request closes.
        event = json.dumps({"session_id": "5f1c-claude", "cwd": "/home/alice/shop", "hook_event_name": "PermissionRequest",
                            "tool_name": "Bash", "tool_input": {"command": "make deploy"}}).encode()
        host = serving.raw_connection(base)
        host.sendall(b"POST /hooks/claude-code?session=host-web&platform=web&web_user=alice&timeout=600 HTTP/1.1\r\n"
                     b"Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Authorization: Bearer {seed['key']}\r\nContent-Length: {len(event)}\r\n\r\n".encode() + event)
        shown_prompt = page.locator("section.ask", has_text="make deploy")
        shown_prompt.get_by_role("radio", name="允许").wait_for()
        prompt = page.locator(f'section.ask[data-request-id="{shown_prompt.get_attribute("data-request-id")}"]')
        host.close()
        prompt.get_by_text("智能体已停止等待。").wait_for()
        assert prompt.locator("form").count() == 0

        # A blocking MCP call whose client leaves and never comes back (a 2 s grace here).
        shown = threading.Event()

        async def call_then_leave():
            async with asyncio.timeout(60), support.client(base, seed["key"], "session=mcp-web&platform=web&web_user=alice") as mcp:
                call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": QUESTIONS[:1]}))
                while not shown.is_set():
                    await asyncio.sleep(0.05)
                call.cancel()
                with contextlib.suppress(MCPError, asyncio.CancelledError):
                    await call

        caller = threading.Thread(target=lambda: asyncio.run(call_then_leave()), daemon=True)
        caller.start()
        shown_ask = page.locator("section.ask", has_text="Which database should we use?")
        shown_ask.get_by_role("radio", name="PostgreSQL").wait_for()
        asked = page.locator(f'section.ask[data-request-id="{shown_ask.get_attribute("data-request-id")}"]')
        shown.set()
        caller.join(timeout=60)
        assert not caller.is_alive()
        asked.get_by_text("智能体已断开，不再等待这个回答。").wait_for(timeout=30_000)
        assert asked.locator("form").count() == 0
        page.screenshot(path=str(ARTIFACTS / "panel-withdrawn.png"), full_page=True)
