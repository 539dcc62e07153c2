"""dingtalk_ask_user_question end to end inside the process: the tool creates a card on the fake
DingTalk server, signed callbacks go through the real view, the worker's card sync PUTs changes."""
from __future__ import annotations

import pytest

from askcards.models import Ask, AskEvent, OutboxEvent
from askcards.tools import dingtalk_ask_user_question as dt

from .integration import (
    QUESTIONS, click, create, out_track_id, private_view, public_view, sync_cards,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_create_delivers_a_pending_card_and_returns_the_reference_result(agent, session, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    ask = outcome.ask
    assert details == {"status": "pending", "questionId": ask.id, "outTrackId": out_track_id(ask),
                       "message": dt.PENDING_MESSAGE}
    params = fake.card_params(details["outTrackId"])
    assert params["card_status"] == "pending" and params["question_id"] == ask.id
    assert params["question_title"] == "环境" and params["form_btn_text"] == "提交"
    assert fake.cards[details["outTrackId"]].open_space_id == "dtv1.card//IM_ROBOT.staff_a"


def test_submit_answers_the_ask_with_the_reference_message(agent, session, bot, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    response = click(bot, outcome.ask, "staff_a", form={"answer_0": "生产"})
    assert response.status_code == 200
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("answered", "submitted")
    assert ask.result["message"] == (
        f"用户回答了交互卡片:\n- question_id: {ask.id}\n- question_title: 环境\n- status: submitted\n"
        "- answers:\n  - 环境: 生产"
    )
    assert public_view(response)["question_desc"] == "已选择：生产。"
    assert private_view(response) == {"user_notice": ""}


def test_callback_answers_without_calling_dingtalk(agent, session, bot, fake):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    before = len(fake.requests)
    click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    assert len(fake.requests) == before


def test_card_sync_puts_only_the_changed_keys(agent, session, bot, fake):
    outcome, details = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    sync_cards()
    card = fake.cards[details["outTrackId"]]
    assert card.updates == [{"card_status": "submitted", "question_desc": "已选择：测试。", "form_btn_text": "已提交",
                             "selected_text": "测试", "selected_values": '["测试"]'}]


def test_wrong_signature_changes_nothing(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    response = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"}, secret="not-the-secret")
    assert response.status_code == 401
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_stale_signature_changes_nothing(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    response = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"}, timestamp_ms=1_000_000_000_000)
    assert response.status_code == 401
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


@pytest.mark.parametrize("shape", ["content", "value", "private"])
def test_every_payload_shape_answers(agent, session, bot, shape):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"}, shape=shape)
    assert Ask.objects.get(pk=outcome.ask.pk).status == "answered"


def test_question_id_finds_the_card_when_the_out_track_id_is_unknown(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"}, out_track="ask_unknown")
    assert Ask.objects.get(pk=outcome.ask.pk).status == "answered"


def test_non_business_callback_consumes_nothing(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    response = click(bot, outcome.ask, "staff_a")
    assert response.json() == {}
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_someone_else_is_told_they_may_not_answer(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    response = click(bot, outcome.ask, "staff_b", form={"answer_0": "测试"})
    assert private_view(response) == {"user_notice": "仅提问对象可以回答这张卡片。"}
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_a_click_naming_nobody_is_refused(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    response = click(bot, outcome.ask, "", form={"answer_0": "测试"})
    assert private_view(response) == {"user_notice": "无法确认你的身份，提交未被记录。"}
    assert Ask.objects.get(pk=outcome.ask.pk).status == "pending"


def test_repeated_identical_submit_is_idempotent(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    first = click(bot, outcome.ask, "STAFF_A", form={"answer_0": "测试"})
    second = click(bot, outcome.ask, "staff_a", form={"answer_0": "测试"})
    assert first.json() == second.json()
    assert OutboxEvent.objects.filter(ask=outcome.ask, type="ask.closed").count() == 1
    assert AskEvent.objects.filter(ask=outcome.ask, kind="closed").count() == 1


def test_user_cancel_tells_the_agent(agent, session, bot):
    outcome, _ = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", cancel=True)
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("cancelled", "by_respondent")
    assert ask.result["message"].startswith("用户取消了交互卡片:\n")
    assert ask.result["message"].endswith("- status: cancelled")


def test_empty_submit_is_an_answer(agent, session, bot, fake):
    outcome, details = create(agent, session, {"fields": [{"name": "note", "label": "备注", "type": "TEXT"}]})
    click(bot, outcome.ask, "staff_a", form={"note": ""})
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("answered", "empty")
    assert ask.result["message"].startswith("用户提交了空交互卡片:\n")
    sync_cards()
    assert fake.card_params(details["outTrackId"])["question_desc"] == "已提交，未填写任何内容。"


def test_card_update_retries_after_dingtalk_is_busy(agent, session, bot, fake):
    from askcards.models import CardMessage
    from askcards.surfaces.base import SyncReport
    from askcards.surfaces.dingtalk.surface import DingTalkSurface
    from django.utils import timezone

    outcome, details = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", cancel=True)
    fake.server_error("/v1.0/card/instances")
    DingTalkSurface().sync_due(timezone.now(), SyncReport())
    message = CardMessage.objects.get(ask=outcome.ask)
    assert message.synced_version < message.version and "system.busy" in message.last_error
    assert message.next_sync_at > timezone.now()  # backing off, not hammering
    sync_cards()
    assert fake.card_params(details["outTrackId"])["question_desc"] == "已取消。"


def test_card_update_gives_up_on_a_permanent_error(agent, session, bot, fake):
    from askcards.models import CardMessage

    outcome, details = create(agent, session, {"questions": QUESTIONS})
    click(bot, outcome.ask, "staff_a", cancel=True)
    fake.fail("/v1.0/card/instances", status=400, code="param.contentUnsafe", message="内容不安全")
    sync_cards()
    message = CardMessage.objects.get(ask=outcome.ask)
    assert message.synced_version == message.version and "param.contentUnsafe" in message.last_error
    assert fake.card_params(details["outTrackId"])["card_status"] == "pending"
