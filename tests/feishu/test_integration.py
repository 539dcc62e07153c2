"""The Feishu surface end to end (issue 4): the agent's API, the worker's card sync against the
fake Feishu OpenAPI (real HTTP on 127.0.0.1), and signed, encrypted callbacks on the view."""
from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from askcards import services
from askcards.models import Ask, AskEvent, Bot, OutboxEvent, PanelPresence, ProgressCard
from askcards.surfaces.feishu import cards
from askcards.surfaces.feishu.surface import render
from tests.fakes.feishu import FakeFeishu
from tests.feishu.helpers import forms, texts
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN, click, converge, message_of, submit_value
from tests.conftest import grant_bot

pytestmark = pytest.mark.django_db(transaction=True)

QUESTIONS = [
    {"question": "Which database should we use?", "header": "Database",
     "options": [{"label": "PostgreSQL", "description": "Relational *server*"}, {"label": "SQLite", "description": "Embedded"}]},
    {"question": "Which platforms?", "header": "Platforms", "multiSelect": True,
     "options": [{"label": "Feishu"}, {"label": "DingTalk"}, {"label": "Web"}]},
]


@pytest.fixture
def feishu_surfaces(settings, recording_surface):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface", "askcards.surfaces.feishu.surface.FeishuSurface"]


@pytest.fixture
def fake():
    with FakeFeishu() as server:
        yield server


@pytest.fixture
def bot(fake, db) -> Bot:
    return services.bot_add(
        platform="feishu", app_id=fake.app_id, app_secret=fake.app_secret, base_url=fake.base_url,
        encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN,
    )


@pytest.fixture
def session(agent, bot, feishu_surfaces):
    grant_bot(agent, bot)
    session, _ = services.session_upsert(agent=agent, key=f"feishu-{bot.app_id}-private-ou_alice", bot=bot)
    return session


def _progress(api, session, **body):
    response = api.put(f"/api/v1/sessions/{session.id}/progress", {"status": "running", "title": "Refactor", **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def _ask(agent, session, questions=QUESTIONS, **kwargs):
    return services.tool_call(agent=agent, session=session, name="ask_user_questions", arguments={"questions": questions}, **kwargs)


def _live(session) -> ProgressCard:
    return ProgressCard.objects.filter(session=session).order_by("-id").first()


def _shown_card(fake, card: ProgressCard) -> dict:
    return fake.messages[message_of(card).message_id].card


# ----------------------------------------------------------------------------------- mounting


def test_feishu_session_without_card_or_panel_fails_at_once(agent, session):
    outcome = _ask(agent, session)
    assert outcome.status == "failed"
    assert json.loads(outcome.tool_result) == {"error": "当前通道无法向用户提问", "reason": "no_surface"}


def test_sub_agent_session_never_gets_the_tool(agent, session, api):
    child, _ = services.session_upsert(agent=agent, key="child", platform="feishu", bot=session.bot, parent=session)
    assert api.get(f"/api/v1/sessions/{child.id}/tools").json() == []
    _progress(api, session)
    assert _ask(agent, child).status == "failed"


def test_wechat_session_never_gets_the_tool(agent, api, feishu_surfaces):
    wechat, _ = services.session_upsert(agent=agent, key="wechat/alice", platform="wechat", user_id="alice")
    assert api.get(f"/api/v1/sessions/{wechat.id}/tools").json() == []
    outcome = _ask(agent, wechat)
    assert (outcome.status, json.loads(outcome.tool_result)["reason"]) == ("failed", "not_available")


def test_group_card_goes_to_the_chat_and_only_the_sender_answers(agent, api, bot, feishu_surfaces, fake):
    grant_bot(agent, bot)
    group, _ = services.session_upsert(
        agent=agent, key="ws/feishu-chat/oc_team", bot=bot, chat_id="oc_team", chat_type="group"
    )
    assert api.put(f"/api/v1/sessions/{group.id}/progress", {"status": "running"}, format="json").status_code == 400
    _progress(api, group, sender_id="ou_carol")
    ask = _ask(agent, group, sender_id="ou_carol").ask
    converge()
    sent = fake.calls("POST", "/open-apis/im/v1/messages")[0]
    assert (sent.query["receive_id_type"], sent.json["receive_id"]) == ("chat_id", "oc_team")
    assert click(bot, operator="ou_dave", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]}).json()["toast"]["content"] == "仅消息发送者可操作"
    assert click(bot, operator="ou_carol", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]}).json()["toast"]["content"] == "已提交"


def test_ask_mounts_as_a_form_on_the_running_card(agent, session, api, fake):
    body = _progress(api, session, content="Step 1: reading the code")
    assert body["message_id"] is None  # sent by the worker, never on the API path
    converge()
    card = _live(session)
    message = fake.messages[message_of(card).message_id]
    sent = fake.calls("POST", "/open-apis/im/v1/messages")[0]
    assert (sent.query["receive_id_type"], message.receive_id) == ("open_id", "ou_alice")
    assert forms(message.card) == [] and "Step 1: reading the code" in texts(message.card)

    outcome = _ask(agent, session)
    assert (outcome.status, outcome.ask.surfaces) == ("pending", ["feishu"])
    converge()
    shown = _shown_card(fake, card)
    assert [form["name"] for form in forms(shown)] == ["ask_0"]
    submit = [e for e in forms(shown)[0]["elements"] if e["tag"] == "button"][0]
    assert submit["behaviors"][0]["value"]["requestId"] == outcome.ask.id
    assert "等待你的回复" in json.dumps(shown, ensure_ascii=False)
    assert api.get(f"/api/v1/sessions/{session.id}").status_code == 200


# ------------------------------------------------------------------------------------ answering


@pytest.fixture
def mounted(agent, session, api, fake):
    _progress(api, session)
    outcome = _ask(agent, session)
    converge()
    return outcome.ask, _live(session)


def test_submit_answers_the_ask_and_the_group_sees_the_clickers_card(mounted, fake, agent_and_key):
    ask, card = mounted
    calls_before = len(fake.requests)
    response = click(
        ask.session.bot, operator="ou_alice", value=submit_value(ask), message_id=message_of(card).message_id,
        form_value={"q0_0": "0", "c0_0": "", "q0_1": ["0", "2"], "c0_1": "WeCom later"},
    )
    assert response.status_code == 200
    assert len(fake.requests) == calls_before  # no Feishu call on the callback's path
    body = response.json()
    assert body["toast"] == {"type": "success", "content": "已提交"}
    assert forms(body["card"]["data"]) == []
    ask.refresh_from_db()
    assert (ask.status, ask.reason) == ("answered", "submitted")
    assert json.loads(ask.result["tool_result"]) == {"answers": [
        {"question": "Which database should we use?", "selectedLabels": ["PostgreSQL"], "customInput": None},
        {"question": "Which platforms?", "selectedLabels": ["Feishu", "Web"], "customInput": "WeCom later"},
    ]}
    # The agent's wait returns the answer.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_and_key[1]}")
    waited = api.get(f"/api/v1/asks/{ask.id}/wait?timeout=1").json()
    assert waited["status"] == "answered" and waited["respondents"][0]["surface"] == "feishu"
    converge()
    assert _shown_card(fake, card) == body["card"]["data"]


def test_multi_select_labels_reach_the_agent_in_the_order_the_form_lists_them(mounted, agent_and_key):
    """The reference keeps a multi-select's selection order (form value ["2", "0"] -> Web, Feishu)."""
    ask, card = mounted
    response = click(
        ask.session.bot, operator="ou_alice", value=submit_value(ask), message_id=message_of(card).message_id,
        form_value={"q0_0": "1", "q0_1": ["2", "0"]},
    )
    assert response.json()["toast"]["content"] == "已提交"
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_and_key[1]}")
    waited = api.get(f"/api/v1/asks/{ask.id}/wait?timeout=1").json()
    assert json.loads(waited["result"]["tool_result"])["answers"][1]["selectedLabels"] == ["Web", "Feishu"]
    assert waited["result"]["answers"][1]["selectedLabels"] == ["Web", "Feishu"]


def test_only_the_sender_may_submit(mounted):
    ask, card = mounted
    response = click(ask.session.bot, operator="ou_bob", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["1"]})
    assert response.status_code == 200
    assert response.json()["toast"] == {"type": "error", "content": "仅消息发送者可操作"}
    assert forms(response.json()["card"]["data"])  # the form stays for the sender
    ask.refresh_from_db()
    assert ask.status == "pending"


def test_blank_question_keeps_the_form_and_asks_again(mounted):
    ask, _ = mounted
    response = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "1", "c0_1": "  "})
    assert response.json()["toast"] == {"type": "warning", "content": "请至少选择一项或填写其他"}
    assert [form["name"] for form in forms(response.json()["card"]["data"])] == ["ask_0"]
    ask.refresh_from_db()
    assert ask.status == "pending"


def test_second_submit_is_stale_and_changes_nothing(mounted):
    ask, _ = mounted
    values = {"q0_0": "1", "q0_1": ["1"]}
    assert click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value=values).json()["toast"]["content"] == "已提交"
    again = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]})
    assert again.json()["toast"] == {"type": "info", "content": "问题已失效"}
    assert forms(again.json()["card"]["data"]) == []
    ask.refresh_from_db()
    assert json.loads(ask.result["tool_result"])["answers"][0]["selectedLabels"] == ["SQLite"]
    assert OutboxEvent.objects.filter(ask=ask, type="ask.closed").count() == 1
    assert AskEvent.objects.filter(ask=ask, kind="ignored").count() == 1


def test_redelivered_event_is_refused_without_state_change(mounted):
    ask, _ = mounted
    blank = {"q0_0": "", "q0_1": []}
    first = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value=blank, event_id="ev-same")
    assert first.json()["toast"]["type"] == "warning"
    again = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]}, event_id="ev-same")
    assert (again.status_code, again.json()) == (200, {})
    ask.refresh_from_db()
    assert ask.status == "pending"


@pytest.mark.parametrize(
    "change",
    [
        {"timestamp": int(time.time()) - 6 * 60},  # older than 5 minutes
        {"tamper": True},  # body changed after signing
        {"encrypt_key": "another-key"},  # not our bot's key
        {"token": "wrong-token"},  # signed and encrypted right, wrong verification token
    ],
    ids=["stale-timestamp", "bad-signature", "wrong-key", "wrong-token"],
)
def test_rejected_callbacks_change_nothing(mounted, change):
    ask, _ = mounted
    response = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]}, **change)
    assert response.status_code in (400, 401)
    ask.refresh_from_db()
    assert ask.status == "pending"


def test_url_verification_answers_the_challenge(bot):
    from django.test import Client

    from askcards.surfaces.feishu import security

    body = json.dumps({"encrypt": security.encrypt(ENCRYPT_KEY, json.dumps(
        {"type": "url_verification", "challenge": "ch-123", "token": VERIFICATION_TOKEN}))})
    response = Client().post(f"/callbacks/feishu/{bot.app_id}/", body, content_type="application/json")
    assert response.json() == {"challenge": "ch-123"}
    assert Client().post("/callbacks/feishu/cli_unknown/", body, content_type="application/json").status_code == 404


def test_deactivated_bot_refuses_callbacks_at_once_in_this_process(mounted):
    ask, _ = mounted
    bot = Bot.objects.get(pk=ask.session.bot_id)
    blank = {"q0_0": "", "q0_1": []}
    assert click(bot, operator="ou_alice", value=submit_value(ask), form_value=blank).status_code == 200  # bot now cached
    bot.is_active = False
    bot.save()  # as the admin or askcards_bot would
    response = click(bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]})
    assert (response.status_code, response.json()) == (404, {"error": "unknown app"})
    ask.refresh_from_db()
    assert ask.status == "pending"


def test_bot_changed_by_another_process_is_seen_within_the_cache_time(mounted, monkeypatch):
    from askcards import selectors

    ask, _ = mounted
    bot = ask.session.bot
    blank = {"q0_0": "", "q0_1": []}
    assert click(bot, operator="ou_alice", value=submit_value(ask), form_value=blank).status_code == 200
    Bot.objects.filter(pk=bot.pk).update(is_active=False)  # no signal: what another process's change looks like here
    assert click(bot, operator="ou_alice", value=submit_value(ask), form_value=blank).status_code == 200
    later = time.monotonic() + selectors.BOT_CACHE_SECONDS + 1
    monkeypatch.setattr(selectors.bots, "_clock", lambda: later)
    response = click(bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]})
    assert response.status_code == 404
    ask.refresh_from_db()
    assert ask.status == "pending"


# ---------------------------------------------------------------------------- panel and card


class _Panel:
    """A panel socket's interest in the hub, recording its pushes, handed over in whichever
    thread publishes them (``loop`` None)."""

    loop = None

    def __init__(self):
        self.messages: list[dict] = []

    def deliver(self, message):
        self.messages.append(message)


def test_panel_and_card_first_answer_wins(agent, api, bot, feishu_surfaces, fake):
    from asgiref.sync import async_to_sync

    from askcards.wake.hub import HUB
    from askcards.surfaces.web import panel_key

    grant_bot(agent, bot)
    session, _ = services.session_upsert(agent=agent, key=f"feishu-{bot.app_id}-private-ou_alice", bot=bot, web_user="alice")
    PanelPresence.objects.create(username="alice", channel_name="test.panel", last_seen=timezone.now())
    panel = _Panel()
    async_to_sync(HUB.register)(panel_key("alice"), panel)
    try:
        _progress(api, session)
        ask = _ask(agent, session).ask
        assert sorted(ask.surfaces) == ["feishu", "web"]
        assert panel.messages.pop(0)["ask_id"] == ask.id  # panel.show
        converge()
        response = click(bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["1"]})
        assert response.json()["toast"]["content"] == "已提交"
        withdraw = panel.messages.pop(0)
        assert withdraw["message"] == {"type": "ask_user_questions_cancelled", "requestId": ask.id,
                                       "reason": "submitted", "surface": "feishu"}
    finally:
        HUB.unregister(panel_key("alice"), panel)
    converge()
    assert forms(_shown_card(fake, _live(session))) == []
    assert services.ask_answer(ask_id=ask.id, answers=[
        {"selectedLabels": ["SQLite"]}, {"selectedLabels": ["Web"]}], surface="web").reason is services.AnswerRefusal.NOT_PENDING


# ------------------------------------------------------------------------- cancel, end, recover


def test_cancel_button_cancels_asks_and_tells_the_agent(mounted, fake):
    ask, card = mounted
    value = {"kind": "feishu_progress", "act": "cancel", "sessionId": ask.session_id, "sender": "ou_alice"}
    assert click(ask.session.bot, operator="ou_bob", value=value, name="").json()["toast"]["content"] == "仅消息发送者可操作"
    response = click(ask.session.bot, operator="ou_alice", value=value, name="", message_id=message_of(card).message_id)
    assert response.json()["toast"] == {"type": "success", "content": "任务已取消"}
    assert forms(response.json()["card"]["data"]) == []
    ask.refresh_from_db()
    assert (ask.status, ask.reason) == ("cancelled", "session_cancelled")
    assert OutboxEvent.objects.filter(type="session.cancel_requested", session=ask.session).count() == 1
    # The agent's in-flight progress does not revive the cancelled card.
    services.progress_put(session=ask.session, status="running", content="still working")
    converge()
    assert _shown_card(fake, card)["header"]["subtitle"]["content"] == cards.STATUS_TEXT["cancelled"]


def test_terminal_progress_ends_the_run_and_the_next_run_gets_a_new_card(mounted, api, agent, fake):
    ask, card = mounted
    _progress(api, ask.session, status="completed")
    ask.refresh_from_db()
    assert (ask.status, ask.reason) == ("cancelled", "session_cancelled")
    _progress(api, ask.session, status="running", title="Next task")
    converge()
    assert ProgressCard.objects.filter(session=ask.session).count() == 2
    assert len(fake.messages) == 2
    assert forms(_shown_card(fake, card)) == [] and _shown_card(fake, card)["header"]["subtitle"]["content"] == cards.STATUS_TEXT["completed"]


def test_agent_recover_shows_recovering_and_old_forms_are_stale(mounted, fake, agent_and_key):
    ask, card = mounted
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_and_key[1]}")
    assert api.post(f"/api/v1/sessions/{ask.session_id}/recover", {}, format="json").json() == {"invalidated": 1}
    converge()
    shown = _shown_card(fake, card)
    assert forms(shown) == [] and "任务正在恢复执行" in texts(shown)
    late = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "0", "q0_1": ["0"]})
    assert late.json()["toast"] == {"type": "info", "content": "问题已失效"}
    ask.refresh_from_db()
    assert (ask.status, ask.reason) == ("invalidated", "restart")


def test_card_that_cannot_be_sent_fails_its_asks(agent, session, api, fake):
    _progress(api, session)
    outcome = _ask(agent, session)  # mounted before the first send
    fake.fail(code=230002, msg="bot is not in the chat", method="POST", path="/open-apis/im/v1/messages")
    converge()
    ask = Ask.objects.get(pk=outcome.ask.id)
    assert (ask.status, ask.reason) == ("failed", "delivery_failed")
    assert fake.calls("POST", "/open-apis/im/v1/messages")[0].code == 230002


def test_rate_limited_patch_is_retried_after_the_reset(mounted, fake):
    ask, card = mounted
    fake.fail(status=429, headers={"x-ogw-ratelimit-reset": "0"}, method="PATCH")
    services.progress_put(session=ask.session, status="running", content="step 2")
    converge()
    assert "step 2" in texts(_shown_card(fake, card))


# ------------------------------------------------------------------------------- the reconciler


def test_burst_of_changes_and_a_submit_converge_within_the_rate_limit(mounted, fake):
    """50 progress updates while the worker syncs, then a submit: the group ends on the clicker's card,
    no PATCH was refused for exceeding 5 per second, and the burst was coalesced."""
    import threading

    ask, card = mounted
    stop = threading.Event()
    pushes = []

    def worker():
        from django.db import connections

        from askcards.surfaces.base import SyncReport
        from askcards.surfaces.feishu.surface import FeishuSurface

        try:
            while not stop.is_set():
                pushes.append(FeishuSurface().sync_due(timezone.now(), SyncReport()))
                time.sleep(0.01)
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    patches_before = len(fake.calls("PATCH"))
    try:
        for step in range(50):
            services.progress_put(session=ask.session, status="running", content=f"step {step}")
            time.sleep(0.01)
        response = click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "1", "q0_1": ["2"]})
    finally:
        stop.set()
        thread.join(timeout=30)
    converge()
    card.refresh_from_db()
    clicker = response.json()["card"]["data"]
    assert _shown_card(fake, card) == clicker == render(card).card
    assert "step 49" in texts(clicker)
    patches = fake.calls("PATCH")[patches_before:]
    # The fake refuses a sixth PATCH of one message within a second with 230020, as Feishu does.
    assert patches and all(p.code == 0 for p in patches), [p.code for p in patches]
    assert len(patches) < 51  # coalesced: each PATCH carries every change made before it started
    print(f"burst: 50 updates + 1 submit -> {len(patches)} PATCHes")


def test_callback_receipts_are_kept_a_day_then_dropped(mounted):
    from datetime import timedelta

    from askcards.models import CallbackReceipt

    ask, _ = mounted
    click(ask.session.bot, operator="ou_alice", value=submit_value(ask), form_value={"q0_0": "", "q0_1": []}, event_id="ev-old")
    receipt = CallbackReceipt.objects.get(event_id="ev-old")
    assert abs((receipt.created_at - timezone.now()).total_seconds()) < 60
    assert services.receipts_prune(now=timezone.now() + timedelta(hours=23)).deleted == 0
    assert services.receipts_prune(now=timezone.now() + timedelta(hours=25)).deleted == 1


def test_asks_beyond_what_a_card_can_hold_are_counted_in_the_panel_note(agent, session, api, fake):
    from askcards.surfaces.feishu.surface import MAX_FORMS

    session.web_user = "alice"
    session.save()
    _progress(api, session)
    small = [{"question": "Go?", "header": "Go", "options": [{"label": "Yes"}, {"label": "No"}]}]
    PanelPresence.objects.create(username="alice", channel_name="x", last_seen=timezone.now())
    for _ in range(MAX_FORMS + 5):
        assert _ask(agent, session, questions=small).status == "pending"
    rendered = render(_live(session))
    assert len(rendered.shown) + len(rendered.overflow) <= MAX_FORMS
    assert f"另有 {MAX_FORMS + 5 - len(rendered.shown)} 组问题超出卡片容量" in texts(rendered.card)
    assert rendered.size <= 30 * 1024 and rendered.elements <= 200


@pytest.mark.parametrize(
    "body",
    [
        {"status": "done"},
        {"status": "running", "title": 5},
        {"status": "running", "detail_url": "not a url"},
        {"status": "running", "colour": "red"},
        {},
    ],
    ids=["unknown-status", "title-not-text", "bad-url", "unknown-field", "no-status"],
)
def test_bad_progress_report_is_refused_and_changes_nothing(session, api, body):
    response = api.put(f"/api/v1/sessions/{session.id}/progress", body, format="json")
    assert response.status_code == 400 and response.json()["error"]["message"]
    assert not ProgressCard.objects.filter(session=session).exists()
