import json

import pytest

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent, Respondent
from tests.conftest import QUESTIONS, answer_for


def test_answer_closes_ask_with_seed_result_shape(pending_ask):
    outcome = services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert outcome.accepted
    pending_ask.refresh_from_db()
    assert (pending_ask.status, pending_ask.reason) == ("answered", "submitted")
    assert json.loads(pending_ask.result["tool_result"]) == {
        "answers": [{"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": None}]
    }


def test_answer_records_respondent_and_surface(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    respondent = Respondent.objects.get(ask=pending_ask)
    assert (respondent.status, respondent.surface) == ("submitted", "web")
    assert respondent.answered_at is not None


def test_second_answer_loses_and_is_audited(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    second = services.ask_answer(ask_id=pending_ask.id, answers=answer_for(labels=("SQLite",)), surface="feishu")
    assert (second.accepted, second.reason) == (False, services.AnswerRefusal.NOT_PENDING)
    pending_ask.refresh_from_db()
    assert pending_ask.result["answers"][0]["selectedLabels"] == ["PostgreSQL"]
    kinds = list(AskEvent.objects.filter(ask=pending_ask).values_list("kind", flat=True))
    assert kinds == ["created", "activated", "closed", "ignored"]
    assert OutboxEvent.objects.filter(ask=pending_ask, type="ask.closed").count() == 1


def test_single_select_custom_text_wins_over_label(pending_ask):
    services.ask_answer(ask_id=pending_ask.id, answers=answer_for(custom="  MySQL  "), surface="web")
    pending_ask.refresh_from_db()
    assert pending_ask.result["answers"][0] == {
        "question": QUESTIONS[0]["question"],
        "selectedLabels": [],
        "customInput": "MySQL",
    }


def test_multi_select_keeps_labels_and_custom_text(agent, present_session):
    questions = [dict(QUESTIONS[0], multiSelect=True)]
    ask = services.tool_call(
        agent=agent, session=present_session, name="ask_user_questions", arguments={"questions": questions}
    ).ask
    services.ask_answer(
        ask_id=ask.id, answers=answer_for(labels=("SQLite", "PostgreSQL"), custom="and Redis"), surface="web"
    )
    ask.refresh_from_db()
    assert ask.result["answers"][0]["selectedLabels"] == ["SQLite", "PostgreSQL"]  # as selected
    assert ask.result["answers"][0]["customInput"] == "and Redis"


@pytest.mark.parametrize(
    "answers, error",
    [
        ([{"selectedLabels": [], "customInput": "   "}], "choose an option"),
        ([{"selectedLabels": ["Oracle"], "customInput": None}], "unknown option"),
        ([{"selectedLabels": ["PostgreSQL", "SQLite"], "customInput": None}], "takes one option"),
        ([], "expected 1 answers"),
        ("PostgreSQL", "expected 1 answers"),
    ],
)
def test_invalid_answer_changes_nothing(pending_ask, answers, error):
    outcome = services.ask_answer(ask_id=pending_ask.id, answers=answers, surface="web")
    assert (outcome.accepted, outcome.reason) == (False, services.AnswerRefusal.INVALID) and error in outcome.detail
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"
    assert not OutboxEvent.objects.filter(ask=pending_ask).exists()


def test_answer_from_someone_else_is_rejected(pending_ask):
    outcome = services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="feishu", respondent_id="mallory")
    assert outcome.reason is services.AnswerRefusal.NOT_RESPONDENT
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"
    assert AskEvent.objects.filter(ask=pending_ask, kind="ignored").count() == 1


def test_respondent_match_is_case_insensitive(pending_ask):
    assert services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="feishu", respondent_id="ALICE").accepted


def test_withdraw_runs_after_commit_on_surfaces(pending_ask, recording_surface, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert ("withdraw", pending_ask.id, "answered") in recording_surface.calls


def test_withdraw_not_run_before_commit(pending_ask, recording_surface, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="web")
    assert not [call for call in recording_surface.calls if call[0] == "withdraw"]
    assert callbacks  # queued for after commit


def test_terminal_ask_status_reason_pairs_enforced_by_database(pending_ask):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        Ask.objects.filter(pk=pending_ask.pk).update(status="answered", reason="timeout")
