"""Operator console (SPEC §8): pages render, actions go through the services, secrets stay hidden."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from askcards import crypto, services
from askcards.errors import InvalidInput
from askcards.models import Agent, Ask, AskEvent, Bot, CardMessage, OutboxEvent
from tests.conftest import QUESTIONS, answer_for, grant_bot

KEY_PATTERN = re.compile(r"ak_[A-Za-z0-9_-]{43}")
WEBHOOK_SECRET_PATTERN = re.compile(r"whsec_[A-Za-z0-9+/=]{44}")


def admin_url(model: str, view: str, *args) -> str:
    # Quoted as the admin quotes object ids: unquoted, an id like q_22… reads as q_"…
    return reverse(f"admin:askcards_{model}_{view}", args=[quote(arg) for arg in args])


def new_ask(agent, session) -> Ask:
    outcome = services.tool_call(
        agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS}
    )
    assert outcome.status == "pending"
    return outcome.ask


@pytest.fixture
def answered_ask(agent, recording_surface):
    session, _ = services.session_upsert(agent=agent, key="web/second", platform="web", web_user="bob", user_id="bob")
    recording_surface.present.add(session.id)
    ask = new_ask(agent, session)
    assert services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="test").accepted
    return ask


@pytest.fixture
def feishu_bot(db) -> Bot:
    return services.bot_add(
        platform="feishu",
        app_id="cli_a1b2c3",
        app_secret="app-secret-PLAINTEXT-1",
        verification_token="verification-PLAINTEXT-2",
        encrypt_key="encrypt-PLAINTEXT-3",
    )


@pytest.fixture
def card_message(pending_ask, feishu_bot) -> CardMessage:
    return CardMessage.objects.create(platform="feishu", bot=feishu_bot, ask=pending_ask, message_id="om_card_1")


def bot_form_data(bot: Bot, **overrides) -> dict:
    data = {
        "app_id": bot.app_id,
        "name": bot.name,
        "base_url": bot.base_url,
        "template_id": bot.template_id,
        "callback_mode": bot.callback_mode,
        "is_active": "on",
        "app_secret": "",
        "verification_token": "",
        "encrypt_key": "",
        "api_secret": "",
    }
    data.update(overrides)
    return data


def key_works(key: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get("/api/v1/asks").status_code == 200


# ------------------------------------------------------------------------------------------ pages


def test_ask_changelist_shows_respondent_progress(admin_client, pending_ask):
    response = admin_client.get(admin_url("ask", "changelist"))
    assert response.status_code == 200
    assert pending_ask.id in response.content.decode()
    assert "0/1" in response.content.decode()


def test_ask_changelist_counts_answered_respondents(admin_client, answered_ask):
    response = admin_client.get(admin_url("ask", "changelist"))
    assert "1/1" in response.content.decode()


def changelist_queries(admin_client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(admin_url("ask", "changelist")).status_code == 200
    return len(queries)


def test_ask_changelist_lists_without_a_query_per_ask(admin_client, agent, present_session):
    new_ask(agent, present_session)
    one = changelist_queries(admin_client)
    for _ in range(5):
        new_ask(agent, present_session)
    assert changelist_queries(admin_client) == one


def test_ask_changelist_searches_by_respondent(admin_client, pending_ask, answered_ask):
    response = admin_client.get(admin_url("ask", "changelist"), {"q": "bob"})
    content = response.content.decode()
    assert answered_ask.id in content
    assert pending_ask.id not in content


def test_ask_changelist_filters_by_platform(admin_client, pending_ask):
    response = admin_client.get(admin_url("ask", "changelist"), {"platform__exact": "feishu"})
    assert response.status_code == 200
    assert pending_ask.id not in response.content.decode()


def test_ask_change_page_shows_progress_and_audit_trail(admin_client, pending_ask, card_message):
    response = admin_client.get(admin_url("ask", "change", pending_ask.id))
    content = response.content.decode()
    assert response.status_code == 200
    assert "0/1" in content
    assert "agent:agent-a" in content  # the "created" audit row
    assert "om_card_1" in content  # the card message inline


def test_ask_change_page_is_read_only(admin_client, pending_ask):
    response = admin_client.post(admin_url("ask", "change", pending_ask.id), {"title": "edited"})
    assert response.status_code == 403


@pytest.mark.parametrize(
    "model",
    ["session", "agent", "bot", "outboxevent", "askevent"],
)
def test_changelist_renders(admin_client, model, pending_ask, feishu_bot):
    services.ask_cancel(ask=pending_ask, actor="agent:agent-a")  # gives the outbox a row
    response = admin_client.get(admin_url(model, "changelist"))
    assert response.status_code == 200


@pytest.mark.parametrize(
    "model",
    ["session", "agent", "bot", "outboxevent", "askevent"],
)
def test_change_page_renders(admin_client, model, pending_ask, feishu_bot):
    services.ask_cancel(ask=pending_ask, actor="agent:agent-a")
    obj = {
        "session": pending_ask.session,
        "agent": pending_ask.agent,
        "bot": feishu_bot,
        "outboxevent": OutboxEvent.objects.first(),
        "askevent": AskEvent.objects.first(),
    }[model]
    response = admin_client.get(admin_url(model, "change", obj.pk))
    assert response.status_code == 200


def test_session_change_saves_web_user_only(admin_client, present_session):
    response = admin_client.post(
        admin_url("session", "change", present_session.pk),
        {"web_user": "bob", "key": "hijacked", "progress_cards-TOTAL_FORMS": "0", "progress_cards-INITIAL_FORMS": "0"},
    )
    assert response.status_code == 302
    present_session.refresh_from_db()
    assert (present_session.web_user, present_session.key) == ("bob", "web/alice")


# ---------------------------------------------------------------------------------- cancel action


def cancel(admin_client, *asks, follow=False):
    return admin_client.post(
        admin_url("ask", "changelist"),
        {"action": "cancel_asks", "_selected_action": [ask.id for ask in asks]},
        follow=follow,
    )


def test_cancel_action_cancels_pending_ask_by_operator(admin_client, pending_ask):
    cancel(admin_client, pending_ask)
    pending_ask.refresh_from_db()
    assert (pending_ask.status, pending_ask.reason) == ("cancelled", "by_operator")


def test_cancel_action_audits_the_operator(admin_client, pending_ask):
    cancel(admin_client, pending_ask)
    closed = AskEvent.objects.get(ask=pending_ask, kind="closed")
    assert (closed.actor, closed.to_status) == ("operator:admin", "cancelled")


def test_cancel_action_tells_the_agent(admin_client, pending_ask):
    cancel(admin_client, pending_ask)
    event = OutboxEvent.objects.get(ask=pending_ask)
    assert (event.type, event.data["reason"]) == ("ask.closed", "by_operator")


def test_cancel_action_withdraws_the_card(
    admin_client, pending_ask, recording_surface, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        cancel(admin_client, pending_ask)
    assert ("withdraw", pending_ask.id, "cancelled") in recording_surface.calls


def test_cancel_action_reports_asks_no_longer_pending(admin_client, pending_ask, answered_ask):
    response = cancel(admin_client, pending_ask, answered_ask, follow=True)
    assert "Cancelled 1 of 2 asks; 1 was no longer pending." in response.content.decode()


def test_cancel_action_leaves_answered_ask_answered(admin_client, answered_ask):
    cancel(admin_client, answered_ask)
    answered_ask.refresh_from_db()
    assert (answered_ask.status, answered_ask.reason) == ("answered", "submitted")


def test_cancel_action_reports_all_cancelled(admin_client, pending_ask):
    response = cancel(admin_client, pending_ask, follow=True)
    assert "Cancelled 1 of 1 ask." in response.content.decode()


# ----------------------------------------------------------------------------------------- agents


def add_agent(admin_client, name="agent-new", webhook_url=""):
    return admin_client.post(admin_url("agent", "add"), {"name": name, "webhook_url": webhook_url}, follow=True)


def test_agent_add_shows_a_working_key(admin_client):
    response = add_agent(admin_client)
    keys = KEY_PATTERN.findall(response.content.decode())
    assert len(keys) == 1
    assert key_works(keys[0])


def test_agent_add_stores_only_the_key_hash(admin_client):
    key = KEY_PATTERN.search(add_agent(admin_client).content.decode()).group()
    agent = Agent.objects.get(name="agent-new")
    assert agent.key_hash == crypto.hash_agent_key(key)
    assert key not in {str(value) for value in Agent.objects.filter(pk=agent.pk).values().get().values()}


def test_agent_key_is_not_shown_again(admin_client):
    key = KEY_PATTERN.search(add_agent(admin_client).content.decode()).group()
    agent = Agent.objects.get(name="agent-new")
    assert key not in admin_client.get(admin_url("agent", "change", agent.pk)).content.decode()
    assert key not in admin_client.get(admin_url("agent", "changelist")).content.decode()


def test_agent_add_with_webhook_shows_signing_secret_once(admin_client):
    response = add_agent(admin_client, webhook_url="https://agent.example/hooks")
    secret = WEBHOOK_SECRET_PATTERN.search(response.content.decode()).group()
    agent = Agent.objects.get(name="agent-new")
    assert agent.webhook_secret == secret
    assert secret not in admin_client.get(admin_url("agent", "change", agent.pk)).content.decode()


def test_agent_add_rejects_duplicate_name(admin_client, agent):
    response = add_agent(admin_client, name=agent.name)
    assert response.status_code == 200
    assert "Agent with this Name already exists." in response.content.decode()


def test_agent_rotate_key_invalidates_old_key(admin_client, agent_and_key):
    agent, old_key = agent_and_key
    admin_client.post(admin_url("agent", "changelist"), {"action": "rotate_key", "_selected_action": [agent.pk]})
    assert not key_works(old_key)


def test_agent_rotate_key_shows_a_working_new_key(admin_client, agent):
    response = admin_client.post(
        admin_url("agent", "changelist"), {"action": "rotate_key", "_selected_action": [agent.pk]}, follow=True
    )
    new_key = KEY_PATTERN.search(response.content.decode()).group()
    assert key_works(new_key)


def test_agent_change_with_new_webhook_url_generates_secret(admin_client, agent):
    response = admin_client.post(
        admin_url("agent", "change", agent.pk),
        {"name": agent.name, "webhook_url": "https://agent.example/hooks", "is_active": "on"},
        follow=True,
    )
    agent.refresh_from_db()
    assert agent.webhook_secret
    assert agent.webhook_secret in response.content.decode()


# ------------------------------------------------------------------------------------------- bots


def test_bot_change_page_never_renders_secrets(admin_client, feishu_bot):
    content = admin_client.get(admin_url("bot", "change", feishu_bot.pk)).content.decode()
    assert "PLAINTEXT" not in content


def test_bot_changelist_never_renders_secrets(admin_client, feishu_bot):
    content = admin_client.get(admin_url("bot", "changelist")).content.decode()
    assert "PLAINTEXT" not in content
    assert "encrypt_key: set" in content


def test_bot_change_with_blank_secrets_keeps_them(admin_client, feishu_bot):
    response = admin_client.post(admin_url("bot", "change", feishu_bot.pk), bot_form_data(feishu_bot, name="renamed"))
    assert response.status_code == 302
    bot = Bot.objects.get(pk=feishu_bot.pk)
    assert (bot.name, bot.app_secret, bot.encrypt_key) == ("renamed", "app-secret-PLAINTEXT-1", "encrypt-PLAINTEXT-3")


def test_bot_change_with_new_secret_replaces_it(admin_client, feishu_bot):
    admin_client.post(admin_url("bot", "change", feishu_bot.pk), bot_form_data(feishu_bot, app_secret="rotated"))
    assert Bot.objects.get(pk=feishu_bot.pk).app_secret == "rotated"


def test_bot_change_clears_a_secret_on_request(admin_client, feishu_bot):
    admin_client.post(
        admin_url("bot", "change", feishu_bot.pk), bot_form_data(feishu_bot, clear_secrets=["encrypt_key"])
    )
    assert Bot.objects.get(pk=feishu_bot.pk).encrypt_key == ""


def test_bot_change_writes_through_the_service_and_is_logged_as_it_logs(admin_client, feishu_bot, caplog):
    caplog.set_level("INFO", logger="askcards.services.agents")
    response = admin_client.post(
        admin_url("bot", "change", feishu_bot.pk),
        bot_form_data(feishu_bot, name="renamed", app_id="cli_other", clear_secrets=["encrypt_key"]),
    )
    assert response.status_code == 302
    bot = Bot.objects.get(pk=feishu_bot.pk)
    # The app id names the bot (read-only on the change form); only the changed fields are written.
    assert (bot.app_id, bot.name, bot.encrypt_key, bot.app_secret) == ("cli_a1b2c3", "renamed", "", "app-secret-PLAINTEXT-1")
    assert [r.getMessage() for r in caplog.records if "updated" in r.getMessage()] == [
        "feishu bot cli_a1b2c3 updated: encrypt_key, name"
    ]


def test_bot_change_the_service_refuses_shows_its_message_and_changes_nothing(admin_client, feishu_bot, caplog):
    caplog.set_level("INFO", logger="askcards.services.agents")
    with pytest.raises(InvalidInput) as refused:
        services.bot_update_check(bot=feishu_bot, template_id="tpl_feishu")
    response = admin_client.post(
        admin_url("bot", "change", feishu_bot.pk), bot_form_data(feishu_bot, name="renamed", template_id="tpl_feishu")
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [refused.value.message]
    assert "a feishu bot has no template_id" in refused.value.message
    bot = Bot.objects.get(pk=feishu_bot.pk)
    assert (bot.name, bot.template_id) == ("", "")
    assert not [r for r in caplog.records if "updated" in r.getMessage()]


def test_bot_add_uses_platform_default_base_url(admin_client):
    response = admin_client.post(
        admin_url("bot", "add"),
        {
            "platform": "dingtalk",
            "app_id": "ding_robot",
            "callback_mode": "stream",
            "is_active": "on",
            "app_secret": "cs",
        },
    )
    assert response.status_code == 302
    bot = Bot.objects.get(app_id="ding_robot")
    assert (bot.base_url, bot.app_secret, bot.callback_mode) == ("https://api.dingtalk.com", "cs", "stream")


def test_bot_add_requires_app_secret(admin_client):
    response = admin_client.post(
        admin_url("bot", "add"), {"platform": "feishu", "app_id": "cli_x", "callback_mode": "http", "app_secret": ""}
    )
    assert response.status_code == 200
    assert not Bot.objects.exists()



def test_bot_add_with_an_option_the_platform_does_not_use_is_a_form_error(admin_client):
    response = admin_client.post(admin_url("bot", "add"), {
        "platform": "feishu", "app_id": "cli_x", "callback_mode": "http", "is_active": "on", "app_secret": "s",
        "template_id": "tpl_feishu",
    })
    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [
        "a feishu bot has no template_id (it takes: app_secret, base_url, encrypt_key, is_active, name, "
        "verification_token)"]
    assert not Bot.objects.exists()


def test_bot_add_of_an_app_already_registered_is_a_form_error_not_a_server_error(admin_client, feishu_bot):
    response = admin_client.post(admin_url("bot", "add"), {
        "platform": "feishu", "app_id": feishu_bot.app_id, "callback_mode": "http", "is_active": "on",
        "app_secret": "another-secret",
    })
    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert Bot.objects.get().app_secret == "app-secret-PLAINTEXT-1"


# ------------------------------------------------------------------------------- outbox and audit


@pytest.fixture
def failed_event(pending_ask) -> OutboxEvent:
    services.ask_cancel(ask=pending_ask, actor="agent:agent-a")
    event = OutboxEvent.objects.get(ask=pending_ask)
    OutboxEvent.objects.filter(pk=event.pk).update(
        failed_at=timezone.now(), next_attempt_at=None, attempts=9, last_error="HTTP 500"
    )
    return event


def test_outbox_retry_action_makes_failed_event_due(admin_client, failed_event):
    before = timezone.now()
    admin_client.post(
        admin_url("outboxevent", "changelist"), {"action": "retry_delivery", "_selected_action": [failed_event.pk]}
    )
    failed_event.refresh_from_db()
    assert failed_event.failed_at is None
    assert before <= failed_event.next_attempt_at <= timezone.now() + timedelta(seconds=1)


def test_outbox_changelist_shows_last_error(admin_client, failed_event):
    response = admin_client.get(admin_url("outboxevent", "changelist"), {"delivery": "failed"})
    assert "HTTP 500" in response.content.decode()


def test_outbox_event_cannot_be_edited(admin_client, failed_event):
    response = admin_client.post(admin_url("outboxevent", "change", failed_event.pk), {"attempts": 0})
    assert response.status_code == 403


def test_ask_event_admin_denies_add(admin_client, pending_ask):
    assert admin_client.get(admin_url("askevent", "add")).status_code == 403


def test_ask_event_admin_denies_change(admin_client, pending_ask):
    event = AskEvent.objects.filter(ask=pending_ask).first()
    response = admin_client.post(admin_url("askevent", "change", event.pk), {"actor": "forged"})
    assert response.status_code == 403
    event.refresh_from_db()
    assert event.actor != "forged"


def test_ask_event_admin_denies_delete(admin_client, pending_ask):
    event = AskEvent.objects.filter(ask=pending_ask).first()
    response = admin_client.post(admin_url("askevent", "delete", event.pk), {"post": "yes"})
    assert response.status_code == 403
    assert AskEvent.objects.filter(pk=event.pk).exists()


def test_session_page_shows_its_progress_cards_and_their_sync_state(admin_client, agent, feishu_bot):
    grant_bot(agent, feishu_bot)
    session, _ = services.session_upsert(agent=agent, key=f"feishu-{feishu_bot.app_id}-private-ou_a", bot=feishu_bot)
    card = services.progress_put(session=session, status="running", title="Nightly import")
    CardMessage.objects.filter(progress_card=card).update(message_id="om_progress_1", last_error="HTTP 429, code 230020")
    page = admin_client.get(admin_url("session", "change", session.pk)).content.decode()
    assert "Nightly import" in page and "om_progress_1" in page and "HTTP 429, code 230020" in page
