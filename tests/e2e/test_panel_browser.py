"""The web panel in a real browser: Debian's Chromium, driven by Playwright, against ``serve``.

A person signs in, sees an ask pushed live, is stopped by the Feishu rule when a question is
left blank, sees an ask the agent cancelled say so, answers another, and the agent's long-poll
(``tools/call`` with ``wait``) returns exactly that answer. A screenshot of the answered panel is
saved to ``tests/artifacts/panel-answered.png`` (and the filled form to ``panel-question.png``).
"""
from __future__ import annotations

import json
import shutil
import threading
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

    # A reload shows nothing pending: the state lives on the server.
    page.reload()
    page.locator('#connection[data-state="open"]').wait_for()
    assert page.locator("section.ask").count() == 0
