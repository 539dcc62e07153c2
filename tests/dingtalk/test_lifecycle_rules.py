"""Reference §7 on askcards' services: deadline, supersede, invalidation by a new message (also
while the card is being delivered), agent restart, pause_failed and dispatch_failed."""
from __future__ import annotations

import threading
from io import StringIO
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from askcards import services
from askcards.worker import Worker
from askcards.models import Ask, OutboxEvent
from askcards.tools import dingtalk_ask_user_question as dt

from .integration import QUESTIONS, click, create, make_bot, make_session, private_view, public_view, sync_cards

pytestmark = pytest.mark.django_db(transaction=True)


def card_desc(fake, details) -> str:
    sync_cards()
    return fake.card_params(details["outTrackId"])["question_desc"]


def test_ordinary_card_expires_after_five_minutes(agent, session, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    assert services.expire_due(now=timezone.now() + timedelta(minutes=4)) == 0
    assert services.expire_due(now=timezone.now() + timedelta(minutes=5, seconds=1)) == 1
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert ask.result["message"] == f"交互卡片已超时:\n- question_id: {ask.id}\n- question_title: 环境\n- status: expired"
    assert card_desc(fake, details) == "问题已失效，请重新发起。"


def test_newer_question_supersedes_the_older_card(agent, session, fake):
    first, first_details = create(agent, session, {"questions": QUESTIONS})
    second, _ = create(agent, session, {"questions": QUESTIONS})
    assert Ask.objects.get(pk=first.ask.pk).reason == "superseded_by_question"
    assert Ask.objects.get(pk=second.ask.pk).status == "pending"
    assert card_desc(fake, first_details) == "已有新的问题卡片，请回答最新卡片。"


def test_another_persons_question_does_not_supersede(agent, bot, fake):
    group = make_session(agent, bot, key="dingtalk/group/cid1", chat_type="group", user_id="", chat_id="cid1")
    mine, _ = create(agent, group, {"questions": QUESTIONS}, sender_id="staff_a")
    create(agent, group, {"questions": QUESTIONS}, sender_id="staff_b")
    assert Ask.objects.get(pk=mine.ask.pk).status == "pending"


def test_new_message_invalidates_the_card_and_a_late_click_changes_nothing(agent, session, bot, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    assert services.session_message(session=session, sender_id="staff_a") == 1
    response = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    assert private_view(response) == {"user_notice": "问题已失效，提交未被记录。"}
    assert public_view(response)["question_desc"].startswith("你在问题卡片发出后发送了新消息")
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("invalidated", "superseded_by_message")
    assert "message" not in ask.result
    assert card_desc(fake, details) == "你在问题卡片发出后发送了新消息，此卡已失效。请重新发起需要填写的问题。"


def test_message_during_delivery_fails_the_tool_call(agent, session, fake):
    fake.slow("/v1.0/card/instances/createAndDeliver", 1.0)

    def message_soon():
        for _ in range(40):  # bounded: until the ask is reserved
            if Ask.objects.filter(status="reserved").exists():
                break
            threading.Event().wait(0.05)
        services.session_message(session=session, sender_id="staff_a")

    thread = threading.Thread(target=message_soon)
    thread.start()
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    thread.join(10)
    assert details["status"] == "failed"
    assert details["error"] == "问题卡片在发送期间已失效，请重新发起。"
    assert details["questionId"] == outcome.ask.id and details["outTrackId"].startswith("ask_")
    assert card_desc(fake, details) == "你在问题卡片发出后发送了新消息，此卡已失效。请重新发起需要填写的问题。"


def test_message_before_the_card_row_exists_still_ends_the_card(agent, session, fake, monkeypatch):
    from askcards.surfaces.dingtalk import surface

    make_id = surface.new_out_track_id

    def message_first():
        # The new message commits after the reservation and before the card's row is written.
        services.session_message(session=session, sender_id="staff_a")
        return make_id()

    monkeypatch.setattr(surface, "new_out_track_id", message_first)
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    assert details["status"] == "failed"
    assert card_desc(fake, details) == "你在问题卡片发出后发送了新消息，此卡已失效。请重新发起需要填写的问题。"


def test_callback_and_new_message_racing_end_the_card_once(agent, session, bot):
    for _ in range(4):
        outcome, _ = create(agent, session, {"questions": QUESTIONS})
        barrier = threading.Barrier(2)
        results = {}

        def answer():
            barrier.wait(10)
            results["click"] = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"}).json()

        def message():
            barrier.wait(10)
            results["message"] = services.session_message(session=session, sender_id="staff_a")

        threads = [threading.Thread(target=answer), threading.Thread(target=message)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        ask = Ask.objects.get(pk=outcome.ask.pk)
        assert OutboxEvent.objects.filter(ask=ask, type="ask.closed").count() == 1
        notice = results["click"]["userPrivateData"]["cardParamMap"]["user_notice"]
        if ask.status == "answered":
            assert results["message"] == 0 and notice == ""
        else:
            assert ask.reason == "superseded_by_message" and results["message"] == 1
            assert notice == "问题已失效，提交未被记录。"
            desc = results["click"]["cardData"]["cardParamMap"]["question_desc"]
            assert desc.startswith("你在问题卡片发出后发送了新消息")  # the loser sees why, at once


def test_agent_restart_invalidates_ordinary_cards(agent, session, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    services.session_recover(session=session)
    assert Ask.objects.get(pk=outcome.ask.pk).reason == "restart"
    assert card_desc(fake, details) == "服务已重启，原问题上下文已失效，请重新发起。"


def test_pause_failed_through_the_api_shows_on_the_card(api, agent, session, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    response = api.post(f"/api/v1/asks/{outcome.ask.id}/cancel", {"reason": "pause_failed"}, format="json")
    assert response.status_code == 200 and response.json()["reason"] == "pause_failed"
    assert card_desc(fake, details) == "当前任务未能暂停，此卡已失效，请重新发起。"


def test_undeliverable_result_turns_the_card_to_dispatch_failed(agent, session, bot, fake):
    agent.webhook_url = "http://127.0.0.1:9/hook"  # nothing listens there
    agent.save()
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    with override_settings(ASKCARDS_WEBHOOK_RETRY_HOURS=0):
        assert Worker().deliveries() == 1  # the worker's lane: the give-up reaches the card
    assert OutboxEvent.objects.get(ask=outcome.ask).failed_at is not None
    assert card_desc(fake, details) == "回答已收到，但未能继续会话，请发送一条普通消息继续。"


def test_validation_errors_read_as_the_reference(agent, session, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS, "timeoutMinutes": 5})
    assert details == {"status": "failed", "error": f"Error: {dt.TIMEOUT_ERROR}"}
    assert outcome.ask is None and not fake.cards


def test_other_platforms_cannot_use_the_tool(agent, fake):
    web, _ = services.session_upsert(agent=agent, key="web/x", platform="web", web_user="alice")
    _, details = create(agent, web, {"questions": QUESTIONS})
    assert details == {"status": "failed", "error": dt.NO_CONTEXT_ERROR}


def test_delivery_failure_fails_the_ask_with_dingtalks_message(agent, session, fake):
    fake.fail_delivery("staff_a", "机器人不在会话内")
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    assert details == {"status": "failed", "error": "机器人不在会话内"}
    assert (outcome.ask.status, outcome.ask.reason) == ("failed", "delivery_failed")


def test_delivery_http_error_reads_as_the_reference_payload(agent, session, fake):
    fake.fail("/v1.0/card/instances/createAndDeliver", status=400, code="param.templateNotExist", message="模板不存在")
    _, details = create(agent, session, {"questions": QUESTIONS})
    assert details["error"] == (
        '[DingTalk][ErrorPayload][ask_user_create] {"status":400,"code":"param.templateNotExist","message":"模板不存在"}'
    )


def test_overlong_title_is_a_tool_failure_not_a_server_error(agent, session, fake):
    outcome, details = create(agent, session, {"fields": [{"name": "x", "label": "长" * 600, "type": "TEXT"}]})
    assert details["status"] == "failed" and "at most 500" in details["error"]
    assert outcome.ask is None and not fake.cards


def test_http_callbacks_need_an_api_secret(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    bot.api_secret = ""
    bot.save()
    response = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    assert response.status_code == 401
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_malformed_callback_is_400_and_changes_nothing(agent, session, bot):
    from django.test import Client

    from tests.fakes.dingtalk import signed_callback

    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    headers, _ = signed_callback("callback-api-secret", out_track_id="x", user_id="staff_a")
    response = Client().post(f"/callbacks/dingtalk/{bot.app_id}/", data=b"{not json", content_type="application/json",
                             headers={k: v for k, v in headers.items() if k != "Content-Type"})
    assert response.status_code == 400
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_http_mode_cards_call_back_on_the_registered_route(agent, fake):
    from django.core.management import call_command

    http_bot = make_bot(fake, callback_mode="http")
    call_command("askcards_dingtalk_register", "--client-id", http_bot.app_id,
                 "--url", "https://askcards.example.com/callbacks/dingtalk/ding-fake-app/", stdout=StringIO())
    s = make_session(agent, http_bot, key="dingtalk/dm/http")
    _, details = create(agent, s, {"questions": QUESTIONS})
    body = fake.cards[details["outTrackId"]].create_body
    assert (body["callbackType"], body["callbackRouteKey"]) == ("HTTP", "askcards-ding-fake-app")


def test_a_dingtalk_card_cannot_be_answered_through_the_seed_answer_path(agent, session):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    answer = [{"question": "部署到哪个环境？", "selectedLabels": ["测试"], "customInput": None}]
    result = services.ask_answer(ask_id=outcome.ask.id, answers=answer, surface="web")
    assert not result.accepted and result.reason is services.AnswerRefusal.INVALID
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_five_minutes_count_from_when_the_card_is_live(agent, session, fake):
    fake.slow("/v1.0/card/instances/createAndDeliver", 1.0)
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert ask.deadline == ask.activated_at + timedelta(minutes=5)
    assert ask.deadline - ask.created_at >= timedelta(minutes=5, seconds=1)


def test_a_click_after_the_deadline_loses_to_it(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    Ask.objects.filter(pk=outcome.ask.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    response = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    assert private_view(response) == {"user_notice": "问题已失效，提交未被记录。"}
    assert public_view(response)["question_desc"] == "问题已失效，请重新发起。"
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("expired", "timeout")
    assert ask.result["message"].startswith("交互卡片已超时:")
