"""The operator dashboard: its numbers for seeded data, its charts, and what its queries cost."""
from __future__ import annotations

import re
import zoneinfo
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from askcards.operators import dashboard
from askcards import services
from askcards.db.statements import SecondsBetween
from askcards.models import Ask, OutboxEvent, Respondent

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=dt_timezone.utc)
DASHBOARD = "/admin/askcards/ask/dashboard/"


@pytest.fixture
def agents(db):
    return {name: services.agent_create(name=name)[0] for name in ("agent-a", "agent-b")}


@pytest.fixture
def sessions(agents):
    return {
        name: services.session_upsert(agent=agent, key=f"web/{name}", platform="web", user_id="u")[0]
        for name, agent in agents.items()
    }


def seed_ask(sessions, agent: str = "agent-a", *, status: str = "pending", reason: str = "", created: datetime = NOW,
             activated: datetime | None = None, closed: datetime | None = None, surfaces=("web",)) -> Ask:
    session = sessions[agent]
    return Ask.objects.create(
        agent=session.agent, session=session, tool="ask_user_questions", title="t", status=status, reason=reason,
        surfaces=list(surfaces), deadline=created + timedelta(minutes=15), created_at=created,
        activated_at=activated or created, closed_at=closed,
    )


def seed_answer(sessions, surface: str, seconds: float, *, shown: datetime = NOW - timedelta(hours=1),
                status: str = "submitted") -> Respondent:
    answered = shown + timedelta(seconds=seconds)
    ask = seed_ask(sessions, status="answered", reason="submitted", created=shown, activated=shown, closed=answered,
                   surfaces=(surface,))
    return Respondent.objects.create(
        ask=ask, respondent_id="u", respondent_key="u", status=status, answered_at=answered, surface=surface
    )


def seed_event(agent, seq: int, *, webhook: bool = True, delivered: datetime | None = None,
               failed: datetime | None = None, created: datetime = NOW) -> OutboxEvent:
    return OutboxEvent.objects.create(
        agent=agent, seq=seq, type="ask.closed", created_at=created, next_attempt_at=created if webhook else None,
        delivered_at=delivered, failed_at=failed,
    )


# ------------------------------------------------------------------------------------ open asks


def test_open_asks_count_per_agent_and_surface(sessions):
    seed_ask(sessions, surfaces=("feishu", "web"))
    seed_ask(sessions, surfaces=("feishu", "web"))
    seed_ask(sessions, status="reserved", surfaces=("web",))
    seed_ask(sessions, "agent-b", surfaces=("dingtalk",))
    seed_ask(sessions, status="expired", reason="timeout", closed=NOW, surfaces=("web",))  # ended: not open
    numbers = dashboard.dashboard(now=NOW)
    assert [(row.agent, row.surface, row.count) for row in numbers.open_asks] == [
        ("agent-a", "feishu", 2),
        ("agent-a", "web", 3),
        ("agent-b", "dingtalk", 1),
    ]
    assert numbers.open_total == 4


# ----------------------------------------------------------------------------- time to answer


def test_time_to_answer_percentiles_per_surface(sessions):
    for seconds in (100, 10, 90, 20, 80, 30, 70, 40, 60, 50):
        seed_answer(sessions, "web", seconds)
    for seconds in (30, 5, 7):
        seed_answer(sessions, "feishu", seconds)
    numbers = dashboard.dashboard(now=NOW)
    # Nearest rank: p50 of 10 answers is the 5th smallest, p90 the 9th; of 3, the 2nd and the 3rd.
    assert [(row.surface, row.answers, round(row.p50, 1), round(row.p90, 1)) for row in numbers.answer_times] == [
        ("feishu", 3, 7.0, 30.0),
        ("web", 10, 50.0, 90.0),
    ]


def test_time_to_answer_counts_from_when_the_ask_was_shown(sessions):
    answer = seed_answer(sessions, "web", 42.5)
    Ask.objects.filter(pk=answer.ask_id).update(created_at=F("created_at") - timedelta(minutes=5))
    [row] = dashboard.dashboard(now=NOW).answer_times
    assert round(row.p50, 1) == 42.5


def test_time_to_answer_leaves_out_old_answers_and_non_answers(sessions):
    seed_answer(sessions, "web", 10)
    seed_answer(sessions, "web", 500, shown=NOW - timedelta(days=8))  # before the window
    seed_answer(sessions, "web", 900, status="cancelled")  # the respondent cancelled: no answer
    [row] = dashboard.dashboard(now=NOW).answer_times
    assert (row.answers, row.p50, row.p90) == (1, pytest.approx(10, abs=0.01), pytest.approx(10, abs=0.01))


def test_seconds_between_is_exact_to_the_millisecond(sessions):
    answer = seed_answer(sessions, "web", 3723.456)
    seconds = Respondent.objects.filter(pk=answer.pk).annotate(
        s=SecondsBetween(F("answered_at"), F("ask__activated_at"))
    ).values_list("s", flat=True).get()
    assert seconds == pytest.approx(3723.456, abs=0.001)


# ---------------------------------------------------------------------------------------- per day


def test_expiries_and_failures_per_day(sessions, agents):
    def ended(status: str, reason: str, ago: timedelta) -> None:
        seed_ask(sessions, status=status, reason=reason, created=NOW - ago - timedelta(minutes=15), closed=NOW - ago)

    ended("expired", "timeout", timedelta(hours=1))
    ended("expired", "timeout", timedelta(days=2))
    ended("expired", "timeout", timedelta(days=2))
    ended("failed", "delivery_failed", timedelta(days=1))
    ended("failed", "no_surface", timedelta(0))  # not a delivery failure
    ended("expired", "timeout", timedelta(days=9))  # before the window
    seed_event(agents["agent-a"], 1, failed=NOW - timedelta(days=6, hours=1))
    numbers = dashboard.dashboard(now=NOW)
    assert [(str(day.day), day.expired, day.delivery_failed, day.webhooks_given_up) for day in numbers.days] == [
        ("2026-11-14", 0, 0, 1),
        ("2026-11-15", 0, 0, 0),
        ("2026-11-16", 0, 0, 0),
        ("2026-11-17", 0, 0, 0),
        ("2026-11-18", 2, 0, 0),
        ("2026-11-19", 0, 1, 0),
        ("2026-11-20", 1, 0, 0),
    ]


def test_days_are_the_operators_days(sessions):
    # 20:30 UTC on the 19th is 04:30 on the 20th in Shanghai.
    seed_ask(sessions, status="expired", reason="timeout", created=NOW - timedelta(hours=16),
             closed=datetime(2026, 11, 19, 20, 30, tzinfo=dt_timezone.utc))
    with timezone.override(zoneinfo.ZoneInfo("Asia/Shanghai")):
        numbers = dashboard.dashboard(now=NOW)
    assert [(str(day.day), day.expired) for day in numbers.days if day.expired] == [("2026-11-20", 1)]
    assert str(numbers.days[-1].day) == "2026-11-20"


# ---------------------------------------------------------------------------------------- backlog


def test_webhook_backlog_per_agent(agents):
    a, b = agents["agent-a"], agents["agent-b"]
    seed_event(a, 1, created=NOW - timedelta(minutes=30))
    seed_event(a, 2)
    seed_event(a, 3, delivered=NOW)  # delivered: not waiting
    seed_event(a, 4, failed=NOW)  # given up: not waiting
    seed_event(b, 1, webhook=False, created=NOW - timedelta(minutes=5))  # waits for /events
    numbers = dashboard.dashboard(now=NOW)
    assert [(row.agent, row.webhook, row.feed, row.oldest) for row in numbers.backlog] == [
        ("agent-a", 2, 0, NOW - timedelta(minutes=30)),
        ("agent-b", 0, 1, NOW - timedelta(minutes=5)),
    ]


# ------------------------------------------------------------------------------------ the page


def bars(page: str, chart: str) -> list[tuple[str, str, float]]:
    svg = re.search(rf'<svg[^>]*data-chart="{chart}"[^>]*>(.*?)</svg>', page, re.S)
    assert svg, f"no {chart} chart"
    return [
        (group, series, float(value))
        for group, series, value in re.findall(
            r'<rect class="bar"[^>]*data-group="([^"]*)" data-series="([^"]*)" data-value="([^"]*)"', svg.group(1)
        )
    ]


@pytest.fixture
def seeded(sessions, agents):
    seed_ask(sessions, surfaces=("feishu", "web"))
    seed_ask(sessions, "agent-b", surfaces=("web",))
    now = timezone.now()
    for seconds in (10, 20, 30):
        seed_answer(sessions, "web", seconds, shown=now - timedelta(hours=1))
    seed_ask(sessions, status="expired", reason="timeout", created=now, closed=now)
    seed_event(agents["agent-a"], 1)


def test_dashboard_draws_open_asks_as_bars(admin_client, seeded):
    page = admin_client.get(DASHBOARD).content.decode()
    assert bars(page, "open-asks") == [
        ("agent-a", "feishu", 1.0),
        ("agent-a", "web", 1.0),
        ("agent-b", "feishu", 0.0),
        ("agent-b", "web", 1.0),
    ]


def test_dashboard_draws_p50_and_p90_per_surface(admin_client, seeded):
    drawn = bars(admin_client.get(DASHBOARD).content.decode(), "time-to-answer")
    assert [(group, series, round(value)) for group, series, value in drawn] == [("web", "p50", 20), ("web", "p90", 30)]


def test_dashboard_draws_seven_days_of_three_series(admin_client, seeded):
    drawn = bars(admin_client.get(DASHBOARD).content.decode(), "per-day")
    assert len(drawn) == 21
    today = timezone.localdate().isoformat()[5:]
    assert (today, "expired", 1.0) in drawn


def test_dashboard_draws_the_backlog(admin_client, seeded):
    drawn = bars(admin_client.get(DASHBOARD).content.decode(), "backlog")
    assert drawn == [("agent-a", "waiting for a webhook attempt", 1.0), ("agent-a", "waiting for /events", 0.0)]


def test_dashboard_says_so_when_nothing_is_open(admin_client, db):
    page = admin_client.get(DASHBOARD).content.decode()
    assert "No open asks." in page
    assert 'data-chart="open-asks"' not in page


def test_dashboard_queries_do_not_grow_with_the_data(admin_client, sessions, agents):
    seed_answer(sessions, "web", 5)
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(DASHBOARD).status_code == 200
    for n in range(20):
        seed_ask(sessions, surfaces=("web",))
        seed_answer(sessions, "web", n)
        seed_event(agents["agent-a"], n + 1)
    with CaptureQueriesContext(connection) as many:
        assert admin_client.get(DASHBOARD).status_code == 200
    assert len(many) == len(few)


def test_dashboard_is_linked_from_the_admin_index(admin_client, db):
    page = admin_client.get("/admin/").content.decode()
    assert f'href="{DASHBOARD}"' in page


def test_dashboard_needs_permission_to_view_asks(client, db):
    from tests.conftest import person

    staff = person("staff-only", "pw")
    staff.is_staff = True
    staff.save()
    client.force_login(staff)
    assert client.get(DASHBOARD).status_code == 403
    assert DASHBOARD not in client.get("/admin/").content.decode()
