"""A click, its card push and the worker's idle sweeps cost the same however many asks other
sessions have waiting (the embedded default, SQLite).

Measured in SQLite virtual-machine steps (a progress handler counts them), which do not depend
on the machine or its load. SQLite plans without statistics: an index led by ``status`` alone
(the admin's ``ask_status_created_idx``) once won the planner over the session's index and the
sweeps' partial indexes, and every click, card push and 0.5 s tick then read every pending ask of
every session (bench_feishu_callback: a submit's CPU grew with the asks waiting)."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from django.utils.datastructures import CaseInsensitiveMapping

from askcards import callbacks, services
from askcards.models import Ask, Bot, Session
from askcards.surfaces.base import SyncReport
from askcards.surfaces.feishu.surface import FeishuSurface
from tests.conftest import grant_bot
from tests.fakes.feishu import FakeFeishu
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN, converge, message_of, signed_callback, submit_value

pytestmark = pytest.mark.django_db(transaction=True)

QUESTIONS = [{"question": "Which database should we use?", "header": "Database",
              "options": [{"label": "PostgreSQL"}, {"label": "SQLite"}]}]
CROWD_SESSIONS, CROWD_PER_SESSION = 200, 10  # 2,000 asks waiting elsewhere
STEP = 10  # the progress handler runs every STEP virtual-machine instructions


@pytest.fixture(autouse=True)
def sqlite_only():
    if connection.vendor != "sqlite":
        pytest.skip("counts SQLite's virtual-machine steps (PostgreSQL plans with statistics)")


@pytest.fixture
def fake():
    with FakeFeishu() as server:
        yield server


@pytest.fixture
def card_session(agent, fake, settings, recording_surface) -> Session:
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface", "askcards.surfaces.feishu.surface.FeishuSurface"]
    bot = services.bot_add(platform="feishu", app_id=fake.app_id, app_secret=fake.app_secret, base_url=fake.base_url,
                           encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)
    grant_bot(agent, bot)
    session, _ = services.session_upsert(agent=agent, key=f"feishu-{bot.app_id}-private-ou_alice", bot=bot)
    services.progress_put(session=session, status="running", title="Refactor", content="Reading the logs")
    return session


def vm_steps(work) -> tuple[int, Any]:
    """SQLite virtual-machine steps ``work()`` takes on this thread's connection, and its result."""
    connection.ensure_connection()
    steps = [0]

    def count() -> int:
        steps[0] += STEP
        return 0  # go on

    connection.connection.set_progress_handler(count, STEP)
    try:
        result = work()
    finally:
        connection.connection.set_progress_handler(None, STEP)
    return steps[0], result


def ask_on_card(agent, session) -> Ask:
    outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                 arguments={"questions": QUESTIONS}, timeout_seconds=3600)
    assert outcome.status == "pending" and outcome.ask is not None
    return outcome.ask


def crowd(agent, bot: Bot) -> None:
    """Pending asks in many other sessions, written as rows (the service would be far slower); the
    agent's quotas lifted, as the benchmarks do, so it may still ask."""
    services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
    now = timezone.now()
    sessions = Session.objects.bulk_create(
        Session(agent=agent, key=f"feishu-{bot.app_id}-private-ou_crowd_{n}", platform=Session.Platform.FEISHU,
                bot=bot, chat_type=Session.ChatType.P2P, user_id=f"ou_crowd_{n}")
        for n in range(CROWD_SESSIONS)
    )
    Ask.objects.bulk_create(
        Ask(agent=agent, session=session, platform=Session.Platform.FEISHU, tool="ask_user_questions",
            sender_id=session.user_id, questions=QUESTIONS, surfaces=["feishu"], status=Ask.Status.PENDING,
            deadline=now + timedelta(hours=1), activated_at=now, created_at=now - timedelta(minutes=n))
        for session in sessions for n in range(CROWD_PER_SESSION)
    )


def submit(ask: Ask, message_id: str) -> tuple[int, dict[str, Any]]:
    """One click on the ask's submit button, handled as the callback route handles it."""
    body, headers = signed_callback(ask.session.bot.app_id, operator=ask.sender_id, value=submit_value(ask),
                                    message_id=message_id, form_value={"q0_0": "1", "c0_0": ""})
    return callbacks.feishu_handle(ask.session.bot.app_id, CaseInsensitiveMapping(headers), body)


def click_and_push(agent, session) -> tuple[int, int]:
    """Steps of one answered click and of the card push it causes."""
    ask = ask_on_card(agent, session)
    converge()  # the form is on the card
    message_id = message_of(session.progress_cards.latest("id")).message_id
    clicked, (status, body) = vm_steps(lambda: submit(ask, message_id))
    assert status == 200 and body["toast"] == {"type": "success", "content": "已提交"}, json.dumps(body)[:300]
    ask.refresh_from_db()
    assert ask.status == Ask.Status.ANSWERED
    later = timezone.now() + timedelta(seconds=1)  # past the pause after converge()'s push
    pushed, pushes = vm_steps(lambda: FeishuSurface().sync_due(later, SyncReport()))
    assert pushes == 1
    return clicked, pushed


def sweeps() -> int:
    now = timezone.now()
    steps, done = vm_steps(lambda: services.expire_due(now=now) + services.waits_lapsed(now=now))
    assert done == 0
    return steps


def test_a_click_and_its_card_push_cost_the_same_with_two_thousand_asks_waiting_elsewhere(agent, card_session):
    alone = click_and_push(agent, card_session)
    crowd(agent, card_session.bot)
    assert Ask.objects.filter(status=Ask.Status.PENDING).count() == CROWD_SESSIONS * CROWD_PER_SESSION
    crowded = click_and_push(agent, card_session)
    # Reading every waiting ask would be tens of thousands of steps more (a few dozen per ask).
    assert crowded[0] < alone[0] * 1.3 + 2000, (alone, crowded)
    assert crowded[1] < alone[1] * 1.3 + 2000, (alone, crowded)


def test_the_workers_idle_sweeps_cost_the_same_with_two_thousand_asks_open(agent, card_session):
    ask_on_card(agent, card_session)
    alone = sweeps()
    crowd(agent, card_session.bot)
    crowded = sweeps()
    assert crowded < alone * 1.3 + 2000, (alone, crowded)
