"""The statements of a Feishu submit and of the card push it causes, counted: each is a round trip
inside every click (bench_feishu_callback), and one more per render crept in once unnoticed (the
run's withdrawn asks, read by the ORM for every response card and every push: +35 % server and
+55 % worker CPU per submit on PostgreSQL). What a card shows of its session's asks is one
statement (``db.statements.card_asks``); a push pass reads it once for its whole batch."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django.utils.datastructures import CaseInsensitiveMapping

from askcards import callbacks
from askcards.models import Ask
from askcards.surfaces.base import SyncReport
from askcards.surfaces.feishu.surface import FeishuSurface
from tests.feishu.integration import converge, message_of, signed_callback, submit_value
from tests.feishu.test_click_cost import ask_on_card, card_session, fake  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

# The bot already read and cached, as it is after the first callback: BEGIN, the receipt, the
# clicked ask, the close (ask, respondent, audit row: three on SQLite, one on PostgreSQL), the
# card's mark, the outbox event (bump, insert: two on SQLite, one on PostgreSQL), COMMIT; after the
# commit the response card's asks (one statement).
SUBMIT_STATEMENTS = {"sqlite": 11, "postgresql": 8}
# A pass pushing one card: the due ids, the rows with bot, card and session, the cards' asks; per
# card the claim and the bookkeeping. Each further card of the same pass: two more.
PASS_STATEMENTS, PER_CARD_STATEMENTS = 3, 2


def statements(work):
    with CaptureQueriesContext(connection) as queries:
        result = work()
    return [query["sql"] for query in queries.captured_queries], result


def answered_click(agent, session) -> list[str]:
    ask = ask_on_card(agent, session)
    converge()  # the form is on the card
    message_id = message_of(session.progress_cards.latest("id")).message_id
    app_id = session.bot.app_id
    body, headers = signed_callback(app_id, operator=ask.sender_id, value=submit_value(ask), message_id=message_id,
                                    form_value={"q0_0": "1", "c0_0": ""})
    sql, (status, body) = statements(lambda: callbacks.feishu_handle(app_id, CaseInsensitiveMapping(headers), body))
    assert status == 200 and body["toast"] == {"type": "success", "content": "已提交"}, json.dumps(body)[:300]
    ask.refresh_from_db()
    assert ask.status == Ask.Status.ANSWERED
    return sql


def test_a_feishu_submit_and_its_card_push_take_a_fixed_number_of_statements(agent, card_session):
    answered_click(agent, card_session)  # the bot read once (selectors' bot cache), the stand-in's token
    sql = answered_click(agent, card_session)
    assert len(sql) == SUBMIT_STATEMENTS[connection.vendor], "\n".join(sql)
    later = timezone.now() + timedelta(seconds=1)  # past the pause after converge()'s push
    sql, pushes = statements(lambda: FeishuSurface().sync_due(later, SyncReport()))
    assert pushes == 1
    assert len(sql) == PASS_STATEMENTS + PER_CARD_STATEMENTS, "\n".join(sql)
