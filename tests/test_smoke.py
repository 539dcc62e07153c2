from askcards import services
from tests.conftest import answer_for


def test_pending_ask_answered_once(pending_ask, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = services.ask_answer(ask_id=pending_ask.id, answers=answer_for(), surface="test")
    second = services.ask_answer(ask_id=pending_ask.id, answers=answer_for(labels=("SQLite",)), surface="test")
    assert first.accepted and not second.accepted
    pending_ask.refresh_from_db()
    assert pending_ask.status == "answered"
    assert pending_ask.result["answers"][0]["selectedLabels"] == ["PostgreSQL"]
