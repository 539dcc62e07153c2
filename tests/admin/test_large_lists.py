"""The admin's lists of the tables that grow with use (asks, sessions, outbox, audit) count their
rows once and filter as they should, on any database. tests/scale/test_admin_lists_at_size.py
checks the same lists on PostgreSQL at size (plans, estimated counts)."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.admin.test_admin import admin_url, new_ask

# ----------------------------------------------------------------------------------- SQLite / any


def count_statements(admin_client, model: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(admin_url(model, "changelist")).status_code == 200
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(")]


@pytest.mark.parametrize("model", ["ask", "session", "outboxevent", "askevent"])
def test_large_list_counts_its_rows_once_and_shows_no_total(admin_client, pending_ask, model):
    # The paginator's count only: no second count of the unfiltered table for "N total".
    counts = [sql for sql in count_statements(admin_client, model) if f'"askcards_{model}"' in sql.split("FROM", 1)[1]]
    assert len(counts) == 1, counts


def test_ask_list_on_sqlite_counts_exactly(admin_client, agent, present_session):
    for _ in range(3):
        new_ask(agent, present_session)
    content = admin_client.get(admin_url("ask", "changelist")).content.decode()
    assert re.search(r"3\s+asks", content)


def test_ask_list_shows_progress_of_each_ask(admin_client, pending_ask):
    # k/N comes from a subquery per listed ask now; it still reads 0/1 for a pending ask.
    content = admin_client.get(admin_url("ask", "changelist")).content.decode()
    assert '<td class="field-progress">0/1</td>' in content


def test_ask_list_filters_by_reason_with_its_status(admin_client, agent, present_session):
    from askcards import services

    cancelled, kept = new_ask(agent, present_session), new_ask(agent, present_session)
    services.ask_cancel(ask=cancelled, reason="by_operator", actor="operator:test")
    content = admin_client.get(admin_url("ask", "changelist"), {"reason": "by_operator"}).content.decode()
    assert cancelled.id[:10] in content and kept.id[:10] not in content


def test_ask_list_filters_by_tool(admin_client, pending_ask):
    shown = admin_client.get(admin_url("ask", "changelist"), {"tool": "ask_user_questions"}).content.decode()
    hidden = admin_client.get(admin_url("ask", "changelist"), {"tool": "dingtalk_ask_user_question"}).content.decode()
    assert pending_ask.id[:10] in shown and pending_ask.id[:10] not in hidden


def test_an_ask_keeps_the_platform_it_was_made_on(agent, present_session):
    from askcards.models import Ask

    ask = new_ask(agent, present_session)
    assert Ask.objects.get(pk=ask.pk).platform == "web" == present_session.platform


def test_ask_list_filters_by_platform(admin_client, agent, present_session, recording_surface):
    from askcards import services

    feishu, _ = services.session_upsert(agent=agent, key="ops/feishu-chat", platform="feishu", user_id="ou_1")
    recording_surface.present.add(feishu.id)
    on_web, on_feishu = new_ask(agent, present_session), new_ask(agent, feishu)
    web_page = admin_client.get(admin_url("ask", "changelist"), {"platform__exact": "web"}).content.decode()
    feishu_page = admin_client.get(admin_url("ask", "changelist"), {"platform__exact": "feishu"}).content.decode()
    assert on_web.id[:10] in web_page and on_feishu.id[:10] not in web_page
    assert on_feishu.id[:10] in feishu_page and on_web.id[:10] not in feishu_page
    assert '<td class="field-platform_tool">feishu · questions</td>' in feishu_page
    # The filter offers every platform, as fixed choices (no scan of the asks for their values).
    assert all(f"?platform__exact={name}" in web_page for name in ("feishu", "dingtalk", "wechat", "web"))
