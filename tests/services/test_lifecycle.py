import json
from datetime import timedelta

from django.utils import timezone

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent, Session
from tests.conftest import QUESTIONS, answer_for


def _call(agent, session, **kwargs):
    return services.tool_call(
        agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS}, **kwargs
    )


def test_tool_call_without_surface_fails_at_once(agent, web_session):
    outcome = _call(agent, web_session)
    assert outcome.status == "failed"
    assert json.loads(outcome.tool_result) == {"error": "当前通道无法向用户提问", "reason": "no_surface"}
    assert outcome.ask.reason == "no_surface"
    assert OutboxEvent.objects.filter(ask=outcome.ask, type="ask.closed").count() == 1


def test_tool_call_on_present_session_is_pending_and_shown(agent, present_session, recording_surface, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        outcome = _call(agent, present_session)
    assert outcome.status == "pending" and outcome.tool_result is None
    assert outcome.ask.surfaces == ["test"]
    assert [hook for hook, ask_id, _ in recording_surface.calls if ask_id == outcome.ask.id] == ["deliver", "show"]


def test_delivery_failure_fails_ask_with_reason(agent, present_session, recording_surface):
    recording_surface.fail_delivery.add(present_session.id)
    outcome = _call(agent, present_session)
    assert (outcome.status, outcome.ask.reason) == ("failed", "delivery_failed")
    assert json.loads(outcome.tool_result)["reason"] == "delivery_failed"


def test_subagent_session_has_no_tool(agent, present_session, recording_surface):
    child, _ = services.session_upsert(agent=agent, key="web/alice/sub", platform="web", parent=present_session)
    recording_surface.present.add(child.id)
    outcome = _call(agent, child)
    assert (outcome.status, outcome.ask.reason) == ("failed", "not_available")


def test_wechat_session_has_no_tool(agent, recording_surface):
    session, _ = services.session_upsert(agent=agent, key="wx/1", platform="wechat")
    recording_surface.present.add(session.id)
    assert _call(agent, session).ask.reason == "not_available"


def test_call_id_makes_call_idempotent(agent, present_session):
    first = _call(agent, present_session, call_id="c1")
    second = _call(agent, present_session, call_id="c1")
    assert first.ask.id == second.ask.id and second.created is False
    assert Ask.objects.filter(agent=agent).count() == 1


def test_timeout_seconds_sets_deadline(agent, present_session):
    before = timezone.now()
    ask = _call(agent, present_session, timeout_seconds=90).ask
    assert before + timedelta(seconds=89) <= ask.deadline <= timezone.now() + timedelta(seconds=91)


def test_default_deadline_is_fifteen_minutes(agent, present_session):
    ask = _call(agent, present_session).ask
    assert abs((ask.deadline - ask.created_at) - timedelta(minutes=15)) < timedelta(seconds=1)


def test_cancel_by_agent_gives_readable_tool_result(pending_ask):
    assert services.ask_cancel(ask=pending_ask, actor="agent:a")
    pending_ask.refresh_from_db()
    assert json.loads(pending_ask.result["tool_result"]) == {"error": "提问已取消", "reason": "by_agent"}


def test_cancel_after_answer_returns_false(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert services.ask_cancel(ask=pending_ask, actor="agent:a") is False
    pending_ask.refresh_from_db()
    assert pending_ask.status == "answered"


def test_expire_before_deadline_does_nothing(pending_ask):
    assert services.ask_expire(ask=pending_ask) is False
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"


def test_expire_due_fires_passed_deadlines(pending_ask):
    Ask.objects.filter(pk=pending_ask.pk).update(deadline=timezone.now() - timedelta(hours=3))
    assert services.expire_due() == 1
    pending_ask.refresh_from_db()
    assert (pending_ask.status, pending_ask.reason) == ("expired", "timeout")
    assert json.loads(pending_ask.result["tool_result"])["reason"] == "timeout"


def test_expire_due_twice_fires_once(pending_ask):
    Ask.objects.filter(pk=pending_ask.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert services.expire_due() == 1
    assert services.expire_due() == 0
    assert AskEvent.objects.filter(ask=pending_ask, kind="closed").count() == 1


def test_recover_invalidates_open_asks_with_restart(pending_ask, present_session):
    assert services.session_recover(session=present_session) == 1
    pending_ask.refresh_from_db()
    assert (pending_ask.status, pending_ask.reason) == ("invalidated", "restart")
    assert json.loads(pending_ask.result["tool_result"])["reason"] == "restart"


def test_recover_after_answer_keeps_answer(pending_ask, present_session):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert services.session_recover(session=present_session) == 0
    pending_ask.refresh_from_db()
    assert pending_ask.status == "answered"


def test_ordinary_message_leaves_blocking_ask_waiting(pending_ask, present_session):
    assert services.session_message(session=present_session, sender_id="alice") == 0
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"


def test_outbox_sequence_increases_per_agent(agent, present_session):
    for _ in range(3):
        ask = _call(agent, present_session).ask
        services.ask_cancel(ask=ask, actor="agent:a")
    assert list(OutboxEvent.objects.filter(agent=agent).values_list("seq", flat=True)) == [1, 2, 3]


def test_session_key_inference_feishu_private(agent):
    session, created = services.session_upsert(agent=agent, key="feishu-cli_a1-private-ou_42")
    assert (session.platform, session.chat_type, session.user_id, created) == ("feishu", "p2p", "ou_42", True)


def test_session_key_inference_feishu_group(agent):
    session, _ = services.session_upsert(agent=agent, key="/work/feishu-chat/oc_9", chat_id="oc_9")
    assert (session.platform, session.chat_type) == ("feishu", "group")


def test_session_upsert_updates_existing(agent):
    services.session_upsert(agent=agent, key="k", platform="web", web_user="alice")
    session, created = services.session_upsert(agent=agent, key="k", web_user="bob")
    assert (created, session.web_user, Session.objects.filter(agent=agent).count()) == (False, "bob", 1)


def test_purge_drops_answers_after_retention(pending_ask, settings):
    settings.ASKCARDS_ANSWER_RETENTION_DAYS = 7
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(custom="secret plan"), surface="web")
    Ask.objects.filter(pk=pending_ask.pk).update(result_delivered_at=timezone.now() - timedelta(days=8))
    assert services.purge_answers() == 1
    pending_ask.refresh_from_db()
    assert "secret plan" not in json.dumps(pending_ask.result)
    assert pending_ask.result["purged"] is True
    assert pending_ask.respondents.get().answers is None
    assert pending_ask.status == "answered"  # lifecycle metadata stays


def test_purge_keeps_answers_within_retention(pending_ask, settings):
    settings.ASKCARDS_ANSWER_RETENTION_DAYS = 7
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    Ask.objects.filter(pk=pending_ask.pk).update(result_delivered_at=timezone.now() - timedelta(days=6))
    assert services.purge_answers() == 0


def test_purge_waits_for_delivery(pending_ask, settings):
    settings.ASKCARDS_ANSWER_RETENTION_DAYS = 0
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert services.purge_answers() == 0  # the agent has not had it yet


def test_zero_retention_purges_on_delivery(pending_ask, settings):
    settings.ASKCARDS_ANSWER_RETENTION_DAYS = 0
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    Ask.objects.filter(pk=pending_ask.pk).update(result_delivered_at=timezone.now())
    assert services.purge_answers() == 1


def test_session_on_explicit_platform_does_not_take_user_from_feishu_key(agent):
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_a1-private-ou_42", platform="web", web_user="alice")
    assert (session.platform, session.user_id) == ("web", "")


def test_saving_a_stale_agent_keeps_event_sequence(agent, present_session):
    from askcards.models import Agent

    stale = Agent.objects.get(pk=agent.pk)
    services.ask_cancel(ask=_call(agent, present_session).ask, actor="agent:a")
    stale.webhook_url = "http://127.0.0.1:9/hook"
    stale.save()
    services.ask_cancel(ask=_call(agent, present_session).ask, actor="agent:a")
    assert list(OutboxEvent.objects.filter(agent=agent).values_list("seq", flat=True)) == [1, 2]
    assert Agent.objects.get(pk=agent.pk).webhook_url == "http://127.0.0.1:9/hook"
