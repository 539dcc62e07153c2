"""What each hand-written statement of ``askcards.db.statements`` does, on the configured database
(SQLite by default, PostgreSQL with DATABASE_URL)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from askcards import outbox, services
from askcards.db import statements
from askcards.models import Agent, Ask, AskEvent, Bot, CallbackReceipt, CardMessage, OutboxEvent, ProgressCard, Respondent
from tests.conftest import grant_bot


@pytest.fixture
def feishu_bot(db) -> Bot:
    return services.bot_add(platform="feishu", app_id="cli_statements", app_secret="app-secret-PLAINTEXT")


# ------------------------------------------------------------------------------- the outbox


def test_agent_event_seq_bump_numbers_an_agents_events_one_after_another(agent, other_agent):
    assert [statements.agent_event_seq_bump(agent.pk)[0] for _ in range(3)] == [1, 2, 3]
    assert statements.agent_event_seq_bump(other_agent.pk)[0] == 1
    assert Agent.objects.values_list("event_seq", flat=True).get(pk=agent.pk) == 3


def test_agent_event_seq_bump_returns_the_agents_webhook_url(agent, other_agent):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    assert statements.agent_event_seq_bump(agent.pk)[1] == "https://agent.example.com/hook"
    assert statements.agent_event_seq_bump(other_agent.pk)[1] == ""


def test_agent_event_seq_bump_refuses_an_unknown_agent(db):
    with pytest.raises(Agent.DoesNotExist):
        statements.agent_event_seq_bump(999_999)


def test_outbox_event_insert_refuses_an_unknown_agent(db):
    with pytest.raises(Agent.DoesNotExist), transaction.atomic():
        statements.outbox_event_insert(agent_id=999_999, type=OutboxEvent.Type.ASK_PROGRESS)
    assert not OutboxEvent.objects.exists()


def test_outbox_append_numbers_an_agents_events_one_after_another(agent, other_agent):
    with transaction.atomic():
        for _ in range(3):
            outbox.append(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
        outbox.append(agent_id=other_agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    assert list(OutboxEvent.objects.filter(agent=agent).values_list("seq", flat=True)) == [1, 2, 3]
    assert list(OutboxEvent.objects.filter(agent=other_agent).values_list("seq", flat=True)) == [1]


def test_outbox_append_schedules_delivery_only_with_a_webhook(agent, other_agent):
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    with transaction.atomic():
        outbox.append(agent_id=agent.pk, type=OutboxEvent.Type.ASK_PROGRESS, data={"说明": "进行中"})
        outbox.append(agent_id=other_agent.pk, type=OutboxEvent.Type.ASK_PROGRESS)
    assert OutboxEvent.objects.get(agent=agent).next_attempt_at is not None
    assert OutboxEvent.objects.get(agent=agent).data == {"说明": "进行中"}
    assert OutboxEvent.objects.get(agent=other_agent).next_attempt_at is None


# ---------------------------------------------------------------------------- card messages


@pytest.fixture
def card(web_session) -> ProgressCard:
    return ProgressCard.objects.create(session=web_session)


@pytest.fixture
def message(card, feishu_bot) -> CardMessage:
    return CardMessage.objects.create(platform="feishu", bot=feishu_bot, progress_card=card, message_id="om_1", version=1)


def test_card_message_claim_wins_once(message):
    now = timezone.now()
    until = now + timedelta(seconds=30)
    assert statements.card_message_claim(message.pk, until=until, now=now) is True
    assert statements.card_message_claim(message.pk, until=until, now=now) is False
    message.refresh_from_db()
    assert message.next_sync_at == until


def test_card_message_claim_takes_a_lapsed_claim(message):
    now = timezone.now()
    CardMessage.objects.filter(pk=message.pk).update(next_sync_at=now - timedelta(seconds=1))
    assert statements.card_message_claim(message.pk, until=now + timedelta(seconds=30), now=now)


def test_card_message_claim_skips_a_message_in_sync(message):
    CardMessage.objects.filter(pk=message.pk).update(synced_version=1)
    now = timezone.now()
    assert not statements.card_message_claim(message.pk, until=now + timedelta(seconds=30), now=now)


def test_card_message_claim_skips_a_message_not_due_yet(message):
    now = timezone.now()
    CardMessage.objects.filter(pk=message.pk).update(next_sync_at=now + timedelta(milliseconds=200))
    assert not statements.card_message_claim(message.pk, until=now + timedelta(seconds=30), now=now)


def test_card_message_claim_refuses_when_an_unchanged_field_changed(message):
    now = timezone.now()
    until = now + timedelta(seconds=30)
    assert not statements.card_message_claim(message.pk, until=until, now=now, message_id="om_other")
    assert statements.card_message_claim(message.pk, until=until, now=now, message_id="om_1")


def test_progress_card_mark_bumps_the_sessions_latest_card_only(web_session, card, message, feishu_bot):
    newer = ProgressCard.objects.create(session=web_session)
    newer_message = CardMessage.objects.create(platform="feishu", bot=feishu_bot, progress_card=newer, message_id="om_2")
    assert statements.progress_card_mark(session_id=web_session.pk) == 1
    assert CardMessage.objects.get(pk=newer_message.pk).version == 1
    assert CardMessage.objects.get(pk=message.pk).version == 1  # unchanged


def test_progress_card_mark_bumps_again_on_each_call(web_session, message):
    statements.progress_card_mark(session_id=web_session.pk)
    statements.progress_card_mark(session_id=web_session.pk)
    assert CardMessage.objects.get(pk=message.pk).version == 3


def test_progress_card_mark_without_a_card_marks_nothing(web_session):
    assert statements.progress_card_mark(session_id=web_session.pk) == 0


# ------------------------------------------------------------------------- callback receipts


def test_callback_receipt_insert_records_a_pair_once(db):
    now = timezone.now()
    assert statements.callback_receipt_insert(platform="feishu", event_id="ev-1", created_at=now) is True
    assert statements.callback_receipt_insert(platform="feishu", event_id="ev-1", created_at=now) is False
    assert statements.callback_receipt_insert(platform="dingtalk", event_id="ev-1", created_at=now) is True
    assert CallbackReceipt.objects.filter(event_id="ev-1").count() == 2


def test_a_duplicate_receipt_leaves_the_callers_transaction_usable(db):
    now = timezone.now()
    with transaction.atomic():
        statements.callback_receipt_insert(platform="feishu", event_id="ev-2", created_at=now)
        assert not statements.callback_receipt_insert(platform="feishu", event_id="ev-2", created_at=now)
        CallbackReceipt.objects.create(platform="feishu", event_id="ev-3")  # no aborted transaction
    assert set(CallbackReceipt.objects.values_list("event_id", flat=True)) == {"ev-2", "ev-3"}


# ------------------------------------------------------------------------------ ask endings


def close_values(now, **audit):
    return {
        "changes": {"status": "answered", "reason": "submitted", "closed_at": now, "result": {"answers": ["是"]}},
        "audit": {"kind": "closed", "from_status": "pending", "to_status": "answered", "actor": "respondent:alice",
                  "surface": "web", "detail": {"reason": "submitted", "说明": "ok"}, "created_at": now, **audit},
    }


def test_ask_close_moves_the_ask_its_respondent_and_adds_the_audit_row(pending_ask):
    now = timezone.now()
    key = pending_ask.sender_id.casefold()
    answered = {"status": "submitted", "answers": [{"question": "q", "selectedLabels": ["是"]}], "answered_at": now,
                "surface": "web"}
    assert statements.ask_close(pending_ask.pk, from_status="pending", respondent=(key, answered), missing=False,
                                **close_values(now))
    ask = Ask.objects.get(pk=pending_ask.pk)
    assert (ask.status, ask.reason, ask.closed_at, ask.result) == ("answered", "submitted", now, {"answers": ["是"]})
    respondent = Respondent.objects.get(ask=ask)
    assert (respondent.status, respondent.answers, respondent.answered_at, respondent.surface) == (
        "submitted", [{"question": "q", "selectedLabels": ["是"]}], now, "web")
    event = AskEvent.objects.filter(ask=ask, kind="closed").get()
    assert (event.from_status, event.to_status, event.actor, event.surface, event.detail, event.created_at) == (
        "pending", "answered", "respondent:alice", "web", {"reason": "submitted", "说明": "ok"}, now)


def test_ask_close_from_another_status_writes_nothing(pending_ask):
    now = timezone.now()
    events_before = AskEvent.objects.count()
    assert not statements.ask_close(pending_ask.pk, from_status="reserved", respondent=None, missing=True,
                                    **close_values(now))
    assert Ask.objects.get(pk=pending_ask.pk).status == "pending"
    assert set(Respondent.objects.filter(ask=pending_ask).values_list("status", flat=True)) == {"pending"}
    assert AskEvent.objects.count() == events_before


def test_ask_close_marks_every_other_pending_respondent_missing(pending_ask):
    Respondent.objects.create(ask=pending_ask, respondent_id="Bob", respondent_key="bob", position=1)
    Respondent.objects.create(ask=pending_ask, respondent_id="Cy", respondent_key="cy", position=2, status="submitted")
    now = timezone.now()
    key = pending_ask.sender_id.casefold()
    answered = {"status": "submitted", "answers": [], "answered_at": now, "surface": "web"}
    assert statements.ask_close(pending_ask.pk, from_status="pending", respondent=(key, answered), missing=True,
                                **close_values(now))
    assert dict(Respondent.objects.filter(ask=pending_ask).values_list("respondent_key", "status")) == {
        key: "submitted", "bob": "missing", "cy": "submitted"}


# ------------------------------------------------------------------------------- hot reads


@pytest.fixture
def feishu_session(agent, feishu_bot):
    grant_bot(agent, feishu_bot)
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_statements-private-ou_alice", bot=feishu_bot)
    return session


def new_ask(session, **fields):
    values = {"tool": "ask_user_questions", "sender_id": "ou_alice", "status": "pending", "surfaces": ["feishu"],
              "deadline": timezone.now() + timedelta(hours=1), **fields}
    return Ask.objects.create(agent=session.agent, session=session, **values)


@pytest.fixture
def feishu_ask(feishu_session):
    return new_ask(feishu_session, questions=[{"question": "数据库？"}])


def test_clicked_ask_reads_the_ask_its_session_and_the_clicked_card(feishu_ask, feishu_session, feishu_bot):
    card = ProgressCard.objects.create(session=feishu_session, title="部署")
    CardMessage.objects.create(platform="feishu", bot=feishu_bot, progress_card=card, message_id="om_9")
    ask, clicked = statements.clicked_ask(ask_id=feishu_ask.pk, bot_id=feishu_bot.pk, platform="feishu",
                                          message_id="om_9")
    expected = Ask.objects.select_related("session").get(pk=feishu_ask.pk)
    assert [getattr(ask, f.attname) for f in Ask._meta.concrete_fields] == [
        getattr(expected, f.attname) for f in Ask._meta.concrete_fields]
    assert ask.questions == [{"question": "数据库？"}] and ask.surfaces == ["feishu"]
    assert ask.session == feishu_session and ask.session.bot_id == feishu_bot.pk
    assert clicked == card and clicked.title == "部署" and clicked.created_at == card.created_at
    # saved like a row the ORM read: an update, not an insert
    ask.title = "new"
    ask.save(update_fields=["title"])
    assert Ask.objects.get(pk=feishu_ask.pk).title == "new"


def test_clicked_ask_without_the_card_or_of_another_bot(feishu_ask, feishu_session, feishu_bot):
    other = services.bot_add(platform="feishu", app_id="cli_other", app_secret="x")
    card = ProgressCard.objects.create(session=feishu_session)
    CardMessage.objects.create(platform="feishu", bot=other, progress_card=card, message_id="om_other")
    for message_id in ("", "om_unknown", "om_other"):
        ask, clicked = statements.clicked_ask(ask_id=feishu_ask.pk, bot_id=feishu_bot.pk, platform="feishu",
                                              message_id=message_id)
        assert ask == feishu_ask and clicked is None
    assert statements.clicked_ask(ask_id=feishu_ask.pk, bot_id=other.pk, platform="feishu", message_id="om_other") == (
        None, None)
    assert statements.clicked_ask(ask_id="q_missing", bot_id=feishu_bot.pk, platform="feishu", message_id="") == (
        None, None)


def same_row(read, expected) -> bool:
    return [getattr(read, f.attname) for f in type(expected)._meta.concrete_fields] == [
        getattr(expected, f.attname) for f in type(expected)._meta.concrete_fields]


def test_agent_by_key_hash_reads_the_agent_as_the_orm_does_but_its_webhook_secret(db):
    from askcards import crypto, services
    from askcards.models import Agent

    agent, key = services.agent_create(name="keyed", webhook_url="https://agent.example/hook")
    found = statements.agent_by_key_hash(crypto.hash_agent_key(key))
    by_orm = Agent.objects.get(pk=agent.pk)
    assert found.get_deferred_fields() == {"webhook_secret"}
    assert {f.attname: getattr(found, f.attname) for f in Agent._meta.concrete_fields if f.name != "webhook_secret"} == {
        f.attname: getattr(by_orm, f.attname) for f in Agent._meta.concrete_fields if f.name != "webhook_secret"}
    assert statements.agent_by_key_hash(crypto.hash_agent_key(key + "x")) is None


def test_agent_ask_reads_the_agents_ask_with_its_session_and_nobody_elses(feishu_ask, feishu_session, other_agent):
    ask = statements.agent_ask(agent_id=feishu_ask.agent_id, ask_id=feishu_ask.pk)
    assert same_row(ask, Ask.objects.get(pk=feishu_ask.pk)) and ask.questions == [{"question": "数据库？"}]
    assert same_row(ask.session, feishu_session)
    assert statements.agent_ask(agent_id=other_agent.pk, ask_id=feishu_ask.pk) is None
    assert statements.agent_ask(agent_id=feishu_ask.agent_id, ask_id="q_missing") is None


def test_ask_respondents_reads_them_all_in_their_order_as_the_orm_does(feishu_ask, feishu_session,
                                                                     django_assert_num_queries):
    Respondent.objects.create(ask=feishu_ask, respondent_id="Cy", respondent_key="cy", position=2,
                              status="submitted", answers=[{"question": "数据库？", "selectedLabels": ["SQLite"]}],
                              answered_at=timezone.now(), surface="feishu")
    Respondent.objects.create(ask=feishu_ask, respondent_id="Bob", respondent_key="bob", position=1)
    other = new_ask(feishu_session)
    Respondent.objects.create(ask=other, respondent_id="Dee", respondent_key="dee", position=0)
    ask = statements.agent_ask(agent_id=feishu_ask.agent_id, ask_id=feishu_ask.pk)

    with django_assert_num_queries(1):
        statements.ask_respondents(ask)
        read = list(ask.respondents.all())  # what was read is there
    expected = list(Respondent.objects.filter(ask=feishu_ask).order_by("position"))
    assert [row.respondent_key for row in read] == ["bob", "cy"]
    assert all(same_row(got, want) for got, want in zip(read, expected, strict=True))
    statements.ask_respondents(other)
    assert [row.respondent_key for row in other.respondents.all()] == ["dee"]


def test_panel_ask_reads_an_ask_only_for_the_granted_web_user_its_session_names(agent, other_agent, web_session):
    ask = new_ask(web_session, surfaces=["web"], sender_id="alice")
    read = statements.panel_ask(username="alice", ask_id=ask.pk)
    assert same_row(read, ask) and same_row(read.session, web_session) and same_row(read.agent, agent)
    assert statements.panel_ask(username="bob", ask_id=ask.pk) is None  # granted, but not the session's person
    assert statements.panel_ask(username="alice", ask_id="q_missing") is None
    # bob's session of agent-b, which bob is granted; revoked, the ask is no longer his panel's
    bobs, _ = services.session_upsert(agent=other_agent, key="web/bob", platform="web", web_user="bob", user_id="bob")
    his = new_ask(bobs, surfaces=["web"], sender_id="bob")
    assert statements.panel_ask(username="bob", ask_id=his.pk).agent == other_agent
    services.agent_revoke(agent=other_agent, username="bob", actor="test")
    assert statements.panel_ask(username="bob", ask_id=his.pk) is None
    assert statements.panel_ask(username="alice", ask_id=his.pk) is None


def card_asks(session_ids, pending=5, withdrawn=5):
    return statements.card_asks(session_ids, pending=pending, withdrawn_reasons=("host_gone", "caller_gone"),
                                withdrawn=withdrawn)


def test_card_asks_reads_the_pending_asks_in_registration_order_with_the_form_fields_only(feishu_ask, feishu_session):
    later = new_ask(feishu_session, questions=[{"question": "二"}])
    new_ask(feishu_session, status="answered", reason="submitted", closed_at=timezone.now(), questions=[])
    rows, withdrawn = card_asks([feishu_session.pk])[feishu_session.pk]
    assert [row.pk for row in rows] == [feishu_ask.pk, later.pk] and withdrawn == []
    assert rows[1].questions == [{"question": "二"}] and rows[1].surfaces == ["feishu"]
    assert rows[0].get_deferred_fields() == {f.attname for f in Ask._meta.concrete_fields} - {
        "id", "session_id", "questions", "sender_id", "surfaces"}
    assert [row.pk for row in card_asks([feishu_session.pk], pending=1)[feishu_session.pk][0]] == [feishu_ask.pk]


def test_card_asks_reads_the_asks_withdrawn_after_being_shown_newest_first_per_session(agent, feishu_ask, feishu_session):
    now = timezone.now()
    other, _ = services.session_upsert(agent=agent, key="feishu-cli_statements-private-ou_bob", bot=feishu_session.bot)

    def withdrawn(session, minutes, **fields):
        values = {"status": "cancelled", "reason": "host_gone", "activated_at": now - timedelta(hours=1),
                  "closed_at": now - timedelta(minutes=minutes), "questions": [{"header": f"q{minutes}"}], **fields}
        return new_ask(session, **values)

    old, new = withdrawn(feishu_session, 30), withdrawn(feishu_session, 5, reason="caller_gone")
    newest = withdrawn(feishu_session, 1)
    withdrawn(feishu_session, 2, activated_at=None)  # never shown
    withdrawn(feishu_session, 3, reason="by_agent")  # cancelled by the agent, not withdrawn
    theirs = withdrawn(other, 4)
    found = card_asks([feishu_session.pk, other.pk, feishu_session.pk], withdrawn=3)
    pending, rows = found[feishu_session.pk]
    assert [row.pk for row in pending] == [feishu_ask.pk]
    assert [row.pk for row in rows] == [newest.pk, new.pk, old.pk]
    assert (rows[1].reason, rows[1].closed_at, rows[1].questions) == ("caller_gone", new.closed_at, [{"header": "q5"}])
    assert found[other.pk] == ([], [theirs])
    assert [row.pk for row in card_asks([feishu_session.pk], withdrawn=2)[feishu_session.pk][1]] == [newest.pk, new.pk]
    assert card_asks([]) == {}


def test_card_asks_reads_the_asks_answered_where_the_card_cannot_show_it_among_the_withdrawn(agent, feishu_session):
    """An answer given in the MCP client's own dialog or an MCP App is a line on the card like a
    withdrawal, in one newest-first list with them; answers on the card or the panel are not."""
    now = timezone.now()

    def ended(minutes, status, reason, closed_on="", **fields):
        values = {"activated_at": now - timedelta(hours=1), "closed_at": now - timedelta(minutes=minutes),
                  "questions": [{"header": f"q{minutes}"}], **fields}
        return new_ask(feishu_session, status=status, reason=reason, closed_on=closed_on, **values)

    on_host = ended(1, "answered", "submitted", "host")
    gone = ended(2, "cancelled", "host_gone")
    in_app = ended(3, "answered", "submitted", "host_app")
    ended(4, "answered", "submitted", "web")  # the panel: the card shows nothing of it
    ended(5, "answered", "submitted", "feishu")
    ended(6, "answered", "submitted", "host", activated_at=None)  # never shown on the card
    oldest = ended(7, "answered", "empty", "host")

    def read(withdrawn):
        return statements.card_asks([feishu_session.pk], pending=5, withdrawn_reasons=("host_gone",),
                                    withdrawn=withdrawn, answered_on=("host", "host_app"))[feishu_session.pk][1]

    rows = read(5)
    assert [row.pk for row in rows] == [on_host.pk, gone.pk, in_app.pk, oldest.pk]
    assert [(row.reason, row.closed_on) for row in rows[:3]] == [
        ("submitted", "host"), ("host_gone", ""), ("submitted", "host_app")]
    assert [row.pk for row in read(2)] == [on_host.pk, gone.pk]  # the newest two across both kinds
    assert [row.pk for row in card_asks([feishu_session.pk])[feishu_session.pk][1]] == [gone.pk]  # not asked for
    with pytest.raises(ValueError):
        statements.card_asks([feishu_session.pk], pending=1, withdrawn_reasons=("host_gone",), withdrawn=1,
                             answered_on=("host'--",))
