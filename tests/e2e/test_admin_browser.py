"""The operator's admin in a real browser: Debian's Chromium, driven by Playwright, against ``serve``.

An operator in Shanghai signs in to the admin in a 1,400 × 900 window: the ask list fits the
window with its deadline column in view, times read in the operator's zone, an ask's page shows
its question, and the dashboard draws its charts. A screenshot of the dashboard is saved to
``tests/artifacts/admin-dashboard.png`` (the ask list to ``admin-ask-list.png``, an ask's page to
``admin-ask-page.png``).
"""
from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from playwright.sync_api import expect

from tests import serving
from tests.e2e.test_panel_browser import ARTIFACTS, CHROMIUM_ARGS, UI_TIMEOUT_MS, chromium_path

WIDTH, HEIGHT = 1400, 900

# Seeded through the ORM: times in the past (answers, expiries) cannot be made through the API.
# Titles, tools and ids are the longest the service takes, so the list is as wide as it gets.
SEED = r"""
import json
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from askcards import services
from askcards.models import Ask, OutboxEvent, Respondent

get_user_model().objects.create_superuser("ops", password="correct horse battery")
now = timezone.now()
agents = {name: services.agent_create(name=name)[0] for name in ("deploy-bot", "research-assistant")}
# deploy-bot's webhook is refused at every attempt (a loopback address): its events stay waiting.
agents["deploy-bot"].webhook_url = "http://127.0.0.1:9/hook"
agents["deploy-bot"].save(update_fields=["webhook_url"])
sessions = {
    (agent, platform): services.session_upsert(agent=a, key=f"{platform}/{agent}/chat-with-a-rather-long-key",
                                               platform=platform, user_id="ou_7d8a6e2f")[0]
    for agent, a in agents.items() for platform in ("feishu", "dingtalk", "web")
}
QUESTIONS = [{"question": "Which database should we use for the production cluster?", "header": "Database",
              "options": [{"label": "PostgreSQL", "description": "Relational, runs as a server"},
                          {"label": "SQLite", "description": "Embedded file"}], "multiSelect": False}]
FIELDS = [{"name": "budget", "label": "预算", "type": "NUMBER", "required": True, "defaultValue": 100}]

def ask(agent, platform, *, status="pending", reason="", created, shown=None, closed=None, surfaces=None, title=None):
    dingtalk = platform == "dingtalk"
    return Ask.objects.create(
        agent=agents[agent], session=sessions[(agent, platform)],
        tool="dingtalk_ask_user_question" if dingtalk else "ask_user_questions",
        title=title or "请确认本次发布到生产环境的数据库迁移方案以及回滚计划是否已经由值班同事审核通过" * 2,
        questions=None if dingtalk else QUESTIONS, fields=FIELDS if dingtalk else None,
        status=status, reason=reason, surfaces=surfaces or [platform], created_at=created,
        activated_at=shown or created, closed_at=closed, deadline=created + timedelta(minutes=15),
    )

def answer(agent, platform, seconds, days_ago):
    shown = now - timedelta(days=days_ago, seconds=seconds + 60)  # answered a minute before now, days_ago days ago
    a = ask(agent, platform, status="answered", reason="submitted", created=shown,
            closed=shown + timedelta(seconds=seconds))
    Respondent.objects.create(ask=a, respondent_id="ou_7d8a6e2f", respondent_key="ou_7d8a6e2f", status="submitted",
                              answered_at=shown + timedelta(seconds=seconds), surface=platform,
                              answers=[{"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"],
                                        "customInput": None}])

open_asks = [("deploy-bot", "feishu", ["feishu", "web"])] * 3 + [("deploy-bot", "dingtalk", None)] * 2 + [
    ("research-assistant", "web", None)] * 4 + [("research-assistant", "feishu", ["feishu"])]
for n, (agent, platform, surfaces) in enumerate(open_asks):
    made = ask(agent, platform, created=now - timedelta(minutes=n), surfaces=surfaces)
    Respondent.objects.create(ask=made, respondent_id=f"ou_{n}", respondent_key=f"ou_{n}")
for n, seconds in enumerate([12, 18, 25, 31, 44, 52, 75, 90, 140, 300]):
    answer("deploy-bot", "feishu", seconds, n % 7)
for n, seconds in enumerate([8, 15, 20, 26, 60]):
    answer("research-assistant", "web", seconds, n % 7)
for n, seconds in enumerate([30, 120, 600]):
    answer("deploy-bot", "dingtalk", seconds, n)
for days_ago, count in [(0, 2), (1, 4), (3, 1), (6, 3)]:
    for _ in range(count):
        at = now - timedelta(days=days_ago, seconds=1)
        ask("deploy-bot", "feishu", status="expired", reason="timeout", created=at - timedelta(minutes=15), closed=at)
for days_ago in (1, 2, 2):
    at = now - timedelta(days=days_ago, seconds=1)
    ask("research-assistant", "dingtalk", status="failed", reason="delivery_failed", created=at, closed=at)
seq = 0
for agent, webhook, waiting, failed_days in [("deploy-bot", True, 6, [2]), ("research-assistant", False, 3, [])]:
    for _ in range(waiting):
        seq += 1
        OutboxEvent.objects.create(agent=agents[agent], seq=seq, type="ask.closed",
                                   created_at=now - timedelta(minutes=seq), next_attempt_at=now if webhook else None)
    for days_ago in failed_days:
        seq += 1
        OutboxEvent.objects.create(agent=agents[agent], seq=seq, type="ask.closed",
                                   created_at=now - timedelta(days=days_ago + 1),
                                   failed_at=now - timedelta(days=days_ago, minutes=1))
print(json.dumps({"ask": Ask.objects.filter(status="pending", tool="ask_user_questions").first().id}))
"""


@pytest.fixture
def service(tmp_path):
    with serving.seeded(tmp_path, SEED) as (base, seed):
        yield base, seed


@pytest.fixture
def operator_page():
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                viewport={"width": WIDTH, "height": HEIGHT}, timezone_id="Asia/Shanghai", locale="en-US"
            )
            page = context.new_page()
            page.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def sign_in(page, base: str, next_path: str) -> None:
    page.goto(f"{base}/admin/login/?next={next_path}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse battery")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}{next_path}")


def overflow(page) -> int:
    """How many pixels the page is wider than the window (0: no horizontal scroll bar)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def bars(page, chart: str) -> dict[tuple[str, str], float]:
    found = page.eval_on_selector_all(
        f'svg[data-chart="{chart}"] rect.bar',
        "rects => rects.map(r => [r.dataset.group, r.dataset.series, Number(r.dataset.value), r.getBBox().height])",
    )
    return {(group, series): value for group, series, value, _ in found}


def test_operator_reads_asks_and_the_dashboard_in_the_browser(service, operator_page):
    base, seed = service
    page = operator_page

    # The ask list fits 1,400 px with its deadline column in view.
    sign_in(page, base, "/admin/askcards/ask/")
    # The first admin page tells the server the browser's zone (a cookie) and reloads itself once.
    page.wait_for_function("performance.getEntriesByType('navigation')[0].type === 'reload'")
    page.wait_for_load_state("load")
    assert "askcards_tz=Asia/Shanghai" in page.evaluate("document.cookie")
    assert overflow(page) <= 0
    deadline = page.locator("#result_list th.column-deadline_at")
    assert deadline.is_visible()
    box = deadline.bounding_box()
    assert box is not None and box["x"] + box["width"] <= WIDTH
    last_cell = page.locator("#result_list tbody tr").first.locator("td.field-deadline_at")
    cell = last_cell.bounding_box()
    assert cell is not None and cell["x"] + cell["width"] <= WIDTH
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-ask-list.png"))

    # An ask's page: the question with its options' descriptions, times in Shanghai's zone. The
    # checks wait (up to UI_TIMEOUT_MS) rather than look once: under a loaded machine this step
    # failed now and then, seen as the text missing or the page at /admin/; a wrong page now
    # fails with the address it reached and its messages.
    # Admin URLs carry the key quoted (an id like q_24… would otherwise read as q$…).
    ask_page = f"{base}/admin/askcards/ask/{quote(seed['ask'])}/change/"
    page.goto(ask_page)
    messages = page.locator("ul.messagelist").all_inner_texts()
    expect(page, f"the ask's page ended at another address; messages: {messages}").to_have_url(ask_page)
    expect(page.get_by_text("Times in Asia/Shanghai.")).to_be_visible()
    question = page.locator("section.askcards-q").first
    expect(question.get_by_text("Relational, runs as a server")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel this ask")).to_be_visible()
    assert overflow(page) <= 0
    page.screenshot(path=str(ARTIFACTS / "admin-ask-page.png"), full_page=True)

    # The dashboard, linked from the admin's index.
    page.goto(f"{base}/admin/")
    page.get_by_role("link", name="Operator dashboard").click()
    page.locator('svg[data-chart="backlog"]').wait_for()
    assert page.locator("svg[data-chart]").count() == 4
    page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)
    assert overflow(page) <= 0

    assert bars(page, "open-asks") == {
        ("deploy-bot", "dingtalk"): 2, ("deploy-bot", "feishu"): 3, ("deploy-bot", "web"): 3,
        ("research-assistant", "dingtalk"): 0, ("research-assistant", "feishu"): 1, ("research-assistant", "web"): 4,
    }
    # Nearest rank: feishu's 10 answers → the 5th and 9th smallest; web's 5 → 3rd and 5th; dingtalk's 3 → 2nd, 3rd.
    times = {key: round(value) for key, value in bars(page, "time-to-answer").items()}
    assert times == {
        ("dingtalk", "p50"): 120, ("dingtalk", "p90"): 600,
        ("feishu", "p50"): 44, ("feishu", "p90"): 140,
        ("web", "p50"): 20, ("web", "p90"): 60,
    }
    per_day = bars(page, "per-day")
    assert len(per_day) == 21
    assert sum(value for (_, series), value in per_day.items() if series == "expired") == 10
    assert sum(value for (_, series), value in per_day.items() if series == "card delivery failed") == 3
    assert sum(value for (_, series), value in per_day.items() if series == "webhook given up") == 1
    assert bars(page, "backlog") == {
        ("deploy-bot", "waiting for a webhook attempt"): 6, ("deploy-bot", "waiting for /events"): 0,
        ("research-assistant", "waiting for a webhook attempt"): 0, ("research-assistant", "waiting for /events"): 3,
    }
    # The tallest bar of a chart reaches at most its top; a zero is drawn flat.
    heights = page.eval_on_selector_all('svg[data-chart="open-asks"] rect.bar', "rs => rs.map(r => r.getBBox().height)")
    assert min(heights) == 0 and 0 < max(heights) <= 200
