"""The admin's ask page as an operator reads it: the question as the person sees it, the answers
per respondent, the audit trail in words, times in the operator's zone, and a Cancel button that
cancels through the same service as the list action."""
from __future__ import annotations

import html
import re
import zoneinfo

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from django.utils.formats import date_format

from askcards import services
from askcards.models import Ask, AskEvent, OutboxEvent
from tests.admin.test_admin import admin_url, new_ask
from tests.conftest import answer_for, person

FIELDS = [
    {"name": "budget", "label": "预算", "type": "NUMBER", "required": True, "defaultValue": 100},
    {
        "name": "env", "label": "环境", "type": "SELECT",
        "options": [{"value": "prod", "text": "生产"}, {"value": "test", "text": "测试"}],
    },
    {"name": "note", "label": "备注", "type": "TEXT_AREA", "placeholder": "写点什么"},
]


def text_of(fragment: str) -> str:
    """What a reader sees of an HTML fragment: tags dropped, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def element(page: str, tag: str, attribute: str, value: str) -> str:
    """The text of the first ``<tag attribute="value">…</tag>`` of the page (no nesting of ``tag``)."""
    match = re.search(rf'<{tag}[^>]*\b{attribute}="{re.escape(value)}"[^>]*>(.*?)</{tag}>', page, re.S)
    assert match, f"no <{tag} {attribute}={value!r}> on the page"
    return text_of(match.group(1))


def page_of(client, ask: Ask, **extra) -> str:
    response = client.get(admin_url("ask", "change", ask.id), **extra)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def dingtalk_session(agent, recording_surface):
    session, _ = services.session_upsert(
        agent=agent, key="dingtalk/group-1", platform="dingtalk", chat_type="group", chat_id="cid1", user_id="boss"
    )
    recording_surface.present.add(session.id)
    return session


@pytest.fixture
def collection(agent, dingtalk_session) -> Ask:
    """A DingTalk form collected from u1 and u2; u1 has answered."""
    outcome = services.tool_call(
        agent=agent,
        session=dingtalk_session,
        name="dingtalk_ask_user_question",
        arguments={
            "title": "Release form",
            "fields": FIELDS,
            "target": {"type": "group", "id": "cid1", "respondentUserIds": ["u1", "u2"]},
        },
    )
    assert outcome.status == "pending"
    form = {"budget": 250, "env": {"index": 0, "value": "prod"}, "note": "ship it"}
    assert services.dingtalk_click(ask=outcome.ask, user_id="u1", action="submit", form=form).kind is services.ClickKind.RECORDED
    return outcome.ask


# ------------------------------------------------------------------------------- the question


def test_ask_page_shows_each_option_with_its_description(admin_client, pending_ask):
    question = element(page_of(admin_client, pending_ask), "section", "data-question", "0")
    assert "Database Which database should we use?" in question
    assert "PostgreSQL Relational" in question
    assert "SQLite Embedded" in question


def test_ask_page_says_whether_several_options_may_be_chosen(admin_client, pending_ask):
    question = element(page_of(admin_client, pending_ask), "section", "data-question", "0")
    assert "One may be chosen (radio buttons)" in question
    assert "其他（可选）" in question  # the free-text box every card shows


def test_ask_page_shows_dingtalk_fields_with_their_types(admin_client, collection):
    page = page_of(admin_client, collection)
    assert element(page, "tr", "data-field", "budget") == "预算 budget number NUMBER required 100 —"
    assert element(page, "tr", "data-field", "env") == (
        "环境 env dropdown, one choice SELECT optional — 生产 value prod 测试 value test"
    )
    assert element(page, "tr", "data-field", "note") == "备注 note multi-line text TEXT_AREA optional — placeholder: 写点什么"


def test_ask_page_hides_the_stored_json_by_default(admin_client, pending_ask):
    page = page_of(admin_client, pending_ask)
    stored = page[page.index("Stored JSON") - 300 : page.index("Stored JSON")]
    assert "collapse" in stored


# --------------------------------------------------------------------------------- the result


def test_ask_page_shows_a_result_row_per_respondent(admin_client, collection):
    page = page_of(admin_client, collection)
    assert element(page, "tr", "data-respondent", "u1").startswith("u1 answered ")
    assert element(page, "tr", "data-respondent", "u1").endswith("dingtalk 250 生产 ship it")
    assert element(page, "tr", "data-respondent", "u2") == "u2 not yet answered — — — — —"


def test_ask_page_result_has_a_column_per_field(admin_client, collection):
    page = page_of(admin_client, collection)
    header = re.search(r'<table class="askcards-answers">\s*<thead>(.*?)</thead>', page, re.S).group(1)
    assert text_of(header) == "Respondent Status Answered at Surface 预算 环境 备注"


def test_ask_page_shows_selected_labels_and_the_other_text(admin_client, agent, present_session):
    ask = new_ask(agent, present_session)
    assert services.ask_answer(ask_id=ask.id, answers=answer_for(custom="MySQL, maybe"), surface="web").accepted
    row = element(page_of(admin_client, ask), "tr", "data-respondent", "alice")
    # A single select's own words replace its option (ask_user_questions' rule).
    assert row.startswith("alice answered ") and row.endswith("web 其他：MySQL, maybe")


def test_ask_page_shows_what_the_agent_reads(admin_client, agent, present_session):
    ask = new_ask(agent, present_session)
    services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="web")
    page = page_of(admin_client, ask)
    assert '&quot;selectedLabels&quot;:[&quot;PostgreSQL&quot;]' in page


# ----------------------------------------------------------------------------- the audit trail


def test_ask_page_labels_rows_in_words(admin_client, collection):
    page = page_of(admin_client, collection)
    assert "object (" not in page  # no "Respondent object (3)", "AskEvent object (6)"
    assert "A respondent answered" in page
    assert "respondent u1" in page


def test_ask_page_audit_says_who_cancelled_and_why(admin_client, pending_ask):
    services.ask_cancel(ask=pending_ask, reason=Ask.Reason.BY_OPERATOR, actor="operator:carol")
    page = page_of(admin_client, pending_ask)
    closed = AskEvent.objects.get(ask=pending_ask, kind="closed")
    last = AskEvent.objects.filter(ask=pending_ask).count() - 1  # inline rows are events-0, events-1, …
    row = re.search(rf'<tr[^>]*id="events-{last}"[^>]*>(.*?)</tr>', page, re.S)
    assert row, "no audit row for the ending"
    assert text_of(row.group(1)).endswith("Ended pending → cancelled operator carol - cancelled by an operator")
    assert closed.actor == "operator:carol"


def test_audit_list_uses_the_same_words(admin_client, pending_ask):
    services.ask_cancel(ask=pending_ask, reason=Ask.Reason.BY_OPERATOR, actor="operator:carol")
    page = admin_client.get(admin_url("askevent", "changelist")).content.decode()
    assert "cancelled by an operator" in page
    assert "operator carol" in page


# ---------------------------------------------------------------------------------------- times


def test_ask_page_shows_times_in_the_operators_zone(admin_client, pending_ask):
    admin_client.cookies["askcards_tz"] = "Asia/Shanghai"
    page = page_of(admin_client, pending_ask)
    shanghai = timezone.localtime(pending_ask.created_at, zoneinfo.ZoneInfo("Asia/Shanghai"))
    assert "Times in Asia/Shanghai." in page
    assert date_format(shanghai, "DATETIME_FORMAT") in page


def test_ask_page_ignores_a_zone_it_does_not_know(admin_client, pending_ask):
    admin_client.cookies["askcards_tz"] = "../../etc/passwd"
    page = page_of(admin_client, pending_ask)
    assert "Times in UTC." in page
    assert date_format(timezone.localtime(pending_ask.created_at, zoneinfo.ZoneInfo("UTC")), "DATETIME_FORMAT") in page


def test_operator_zone_applies_to_admin_pages_only(client, admin_user, pending_ask):
    client.force_login(admin_user)
    client.cookies["askcards_tz"] = "Asia/Shanghai"
    assert client.get("/healthz").status_code == 200  # served in the server's zone, untouched
    assert "Times in Asia/Shanghai." in page_of(client, pending_ask)


def test_ask_list_shows_compact_times_in_the_operators_zone(admin_client, pending_ask):
    admin_client.cookies["askcards_tz"] = "America/New_York"
    page = admin_client.get(admin_url("ask", "changelist")).content.decode()
    deadline = timezone.localtime(pending_ask.deadline, zoneinfo.ZoneInfo("America/New_York"))
    assert f'<td class="field-deadline_at">{deadline:%Y-%m-%d %H:%M}</td>' in page


# --------------------------------------------------------------------------------------- cancel


def cancel_button(client, ask: Ask, **extra):
    return client.post(admin_url("ask", "cancel", ask.id), follow=True, **extra)


def test_ask_page_offers_cancel_while_open(admin_client, pending_ask):
    assert "Cancel this ask" in page_of(admin_client, pending_ask)


def test_ask_page_offers_no_cancel_once_ended(admin_client, pending_ask):
    services.ask_cancel(ask=pending_ask, actor="agent:agent-a")
    assert "Cancel this ask" not in page_of(admin_client, pending_ask)


def test_cancel_button_cancels_by_operator(admin_client, pending_ask):
    response = cancel_button(admin_client, pending_ask)
    pending_ask.refresh_from_db()
    assert (pending_ask.status, pending_ask.reason) == ("cancelled", "by_operator")
    assert f"Ask {pending_ask.id} cancelled" in response.content.decode()


def test_cancel_button_audits_the_operator_and_tells_the_agent(admin_client, pending_ask):
    cancel_button(admin_client, pending_ask)
    closed = AskEvent.objects.get(ask=pending_ask, kind="closed")
    event = OutboxEvent.objects.get(ask=pending_ask)
    assert (closed.actor, event.type, event.data["reason"]) == ("operator:admin", "ask.closed", "by_operator")


def test_cancel_button_withdraws_the_cards(admin_client, pending_ask, recording_surface,
                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        cancel_button(admin_client, pending_ask)
    assert ("withdraw", pending_ask.id, "cancelled") in recording_surface.calls


def test_cancel_button_refuses_an_ended_ask_and_changes_nothing(admin_client, agent, present_session):
    ask = new_ask(agent, present_session)
    services.ask_answer(ask_id=ask.id, answers=answer_for(), surface="web")
    before = (list(AskEvent.objects.values_list("id", flat=True)), OutboxEvent.objects.count())
    response = cancel_button(admin_client, ask)
    ask.refresh_from_db()
    assert (ask.status, ask.reason) == ("answered", "submitted")
    assert (list(AskEvent.objects.values_list("id", flat=True)), OutboxEvent.objects.count()) == before
    assert f"Ask {ask.id} was not cancelled: it has already ended as answered (answered). Nothing was changed." in (
        html.unescape(response.content.decode())
    )


def test_cancel_button_needs_post(admin_client, pending_ask):
    assert admin_client.get(admin_url("ask", "cancel", pending_ask.id)).status_code == 405
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"


def test_cancel_button_needs_the_change_permission(client, pending_ask):
    viewer = person("viewer", "pw")
    viewer.is_staff = True
    viewer.save()
    viewer.user_permissions.add(Permission.objects.get(codename="view_ask"))
    client.force_login(viewer)
    assert "Cancel this ask" not in page_of(client, pending_ask)
    assert client.post(admin_url("ask", "cancel", pending_ask.id)).status_code == 403
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"


def test_cancel_button_for_an_unknown_ask_changes_nothing(admin_client, pending_ask):
    response = admin_client.post(admin_url("ask", "cancel", "q_" + "0" * 32), follow=True)
    assert f"There is no ask {'q_' + '0' * 32!r}; nothing was cancelled." in html.unescape(response.content.decode())
    pending_ask.refresh_from_db()
    assert pending_ask.status == "pending"
