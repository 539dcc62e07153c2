"""The tenancy/abuse issue, points 6 and 7: one check of a submitted DingTalk form, the web panel's,
serves the card's callback (HTTP and Stream) and the panel alike.

6. A person's long answer is never refused: a 1,234-character, 600-line ``TEXT_AREA`` answer is
   accepted and reaches the agent whole; the card update shortens what it shows to DingTalk's
   ~1 KB per value. Over the bound every surface shares is refused on the card itself (its private
   ``user_notice``, HTTP 200 — never a 400, which DingTalk shows as a generic failure) and the ask
   stays pending.
7. A signed callback is checked like the panel: a required field omitted or an impossible date is
   refused with the panel's words; a hidden or read-only field set to another value keeps its
   default; unknown fields are dropped; both are named in the answer's audit row.
"""
from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.contrib.admin.utils import quote
from django.db import connections
from django.urls import reverse
from rest_framework.test import APIClient

from askcards import services
from askcards.models import Ask, AskEvent, CardMessage, OutboxEvent, Respondent
from askcards.surfaces.base import SHORTENED_MARK
from askcards.surfaces.dingtalk.cards import VALUE_MAX_BYTES
from askcards.surfaces.dingtalk.stream import CARD_CALLBACK_TOPIC
from askcards.tools import ANSWER_MAX_CHARS, ANSWER_TEXT_MAX_CHARS
from tests.conftest import grant_bot, person
from tests.consumers.test_panel import _panel
from tests.consumers.test_panel_dingtalk import _next, _submit
from tests.dingtalk.conftest import bot, dingtalk_surface, fake, session  # noqa: F401  (the DingTalk fixtures)
from tests.dingtalk.integration import click, create, make_bot, out_track_id, sync_cards
from tests.dingtalk.test_stream import fast_client, running
from tests.fakes.dingtalk import FakeDingTalk, callback_payload
from tests.fakes.dingtalk_stream import FakeStreamGateway
from tests.security.test_lengths import LONG

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "提交未被记录："
FIELDS = [
    {"name": "note", "label": "说明", "type": "TEXT_AREA", "required": True},
    {"name": "code", "label": "代号", "type": "TEXT"},
    {"name": "tags", "label": "标签", "type": "TEXT_ARRAY"},
    {"name": "day", "label": "日期", "type": "DATE"},
    {"name": "trace", "label": "追踪", "type": "TEXT", "hidden": True, "defaultValue": "t-1"},
    {"name": "team", "label": "团队", "type": "TEXT", "readOnly": True, "defaultValue": "平台组"},
]
DEFAULTS = {"追踪": "t-1", "团队": "平台组"}  # what every recorded answer holds of the locked fields

# (what the attack is, the form sent, what the panel and the card say — None when it is accepted,
#  the answers recorded, the answer's audit row beyond its reason)
ATTACKS = [
    ("required omitted", {"day": "2026-09-18"}, "请填写「说明」。", None, None),
    ("impossible date", {"note": "好", "day": "2024-13-45"}, "「日期」应为日期（年-月-日）。", None, None),
    ("over the bound", {"note": "长" * (ANSWER_TEXT_MAX_CHARS + 1)}, "「说明」超过 10000 字，请精简后再提交。", None, None),
    ("over the bound in all", {"note": "长" * ANSWER_TEXT_MAX_CHARS, "code": "长" * ANSWER_TEXT_MAX_CHARS,
                               "tags": ["多"]}, f"回答合计超过 {ANSWER_MAX_CHARS} 字，请精简后再提交。", None, None),
    ("hidden changed", {"note": "好", "trace": "forged"}, None, {"说明": "好", **DEFAULTS},
     {"kept_defaults": ["trace"], "kept_defaults_count": 1}),
    ("read-only changed", {"note": "好", "team": "别的组", "trace": None}, None, {"说明": "好", **DEFAULTS},
     {"kept_defaults": ["team"], "kept_defaults_count": 1}),
    ("unknown fields", {"note": "好", "is_admin": True, "callback_url": "http://attacker.invalid/"}, None,
     {"说明": "好", **DEFAULTS}, {"dropped_fields": ["callback_url", "is_admin"], "dropped_fields_count": 2}),
]
ATTACK_IDS = [attack[0] for attack in ATTACKS]


@pytest.fixture(params=["http", "stream"])
def send(request, bot, fake):  # noqa: F811  (the DingTalk fixtures)
    """``send(ask, form, user_id)``: a submit on the card, as DingTalk delivers it on one transport
    (a signed HTTP callback, or a frame through the Stream client), returning the reply body."""
    if request.param == "http":
        def over_http(ask, form, user_id="staff_a"):
            response = click(bot, ask, user_id, form=form)
            assert response.status_code == 200, response.content  # never a 400: DingTalk shows those as failures
            return response.json()

        yield over_http
        return
    with FakeStreamGateway(fake) as gateway, running(fast_client(bot)):
        gateway.wait_connected(1)

        def over_stream(ask, form, user_id="staff_a"):
            payload = callback_payload(out_track_id=out_track_id(ask), user_id=user_id, question_id=ask.id, form=form)
            frame = json.dumps(payload, ensure_ascii=False)
            ack = gateway.ack_for(gateway.push("CALLBACK", CARD_CALLBACK_TOPIC, frame))
            assert ack["code"] == 200
            return json.loads(ack["data"])["response"]

        yield over_stream


def notice(reply) -> str:
    return reply["userPrivateData"]["cardParamMap"]["user_notice"]


def answers_of(ask) -> dict[str, str]:
    row = Respondent.objects.get(ask=ask, respondent_key="staff_a")
    return {item["question"]: item["answer"] for item in row.answers["answers"]}


def unchanged(ask, events_before: int) -> bool:
    """Refused: the ask and its respondent still pending, nothing for the agent, one audit row."""
    ask.refresh_from_db()
    rows = list(Respondent.objects.filter(ask=ask).values_list("status", flat=True))
    return (ask.status == "pending" and set(rows) == {"pending"}
            and not OutboxEvent.objects.filter(ask=ask, type="ask.closed").exists()
            and list(AskEvent.objects.filter(ask=ask).values_list("kind", flat=True)[events_before:]) == ["ignored"])


def card_values_fit(values: dict[str, str]) -> bool:
    return all(len(value.encode("utf-8")) <= VALUE_MAX_BYTES for value in values.values())


# ------------------------------------------------------------------------------ long answers


def test_a_long_text_area_answer_is_accepted_and_reaches_the_agent_whole(
        agent_and_key, session, send, fake, admin_client):  # noqa: F811
    agent, key = agent_and_key
    outcome, details = create(agent, session, {"fields": FIELDS, "title": "周报"})

    reply = send(outcome.ask, {"note": LONG, "code": "A1"})

    assert notice(reply) == ""
    assert card_values_fit(reply["cardData"]["cardParamMap"])  # the clicker's own card, at once
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("answered", "submitted")
    assert answers_of(ask)["说明"] == LONG
    # What the agent reads: the ask.closed event's message, the answer whole, every line of it.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    events = api.get("/api/v1/events?after=0").json()["events"]
    closed = next(event for event in events if event["type"] == "ask.closed")
    assert f"  - 说明: {LONG}\n" in closed["data"]["ask"]["result"]["message"]
    # The operator sees it whole too.
    page = admin_client.get(reverse("admin:askcards_ask_change", args=[quote(ask.pk)]))
    assert page.status_code == 200, (page.status_code, page.get("Location"))
    assert LONG in page.content.decode()
    # The card update everyone else sees: each value within DingTalk's budget, the cut marked.
    sync_cards()
    put = fake.cards[details["outTrackId"]].updates[-1]
    assert card_values_fit(put) and put["card_status"] == "submitted"
    assert put["question_desc"].startswith("已选择：这一行稍长些") and SHORTENED_MARK in put["question_desc"]
    assert put["selected_text"].endswith(SHORTENED_MARK)
    values = json.loads(put["selected_values"])  # still JSON, every value there, the long one cut
    assert values[1:] == ["A1", "t-1", "平台组"] and values[0].endswith("…") and LONG.startswith(values[0][:-1])


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a[0].startswith("over")], ids=lambda a: a[0])
def test_an_answer_over_the_bound_is_refused_on_the_card_and_a_shorter_one_counts(
        agent, session, send, fake, attack):  # noqa: F811
    _, form, why, _, _ = attack
    outcome, details = create(agent, session, {"fields": FIELDS})
    events = AskEvent.objects.filter(ask=outcome.ask).count()

    reply = send(outcome.ask, form)

    assert reply["userPrivateData"]["cardParamMap"] == {"user_notice": REFUSED + why}
    assert "cardData" not in reply
    assert unchanged(outcome.ask, events)
    sync_cards()
    assert fake.cards[details["outTrackId"]].updates == []  # nothing to show: the card stays open
    # The same person shortens it and submits again: it counts.
    assert notice(send(outcome.ask, {"note": "长" * ANSWER_TEXT_MAX_CHARS})) == ""
    assert answers_of(outcome.ask)["说明"] == "长" * ANSWER_TEXT_MAX_CHARS


def test_a_collection_respondents_long_answer_stays_private_and_within_budget(agent, session, bot, send):  # noqa: F811
    target = {"type": "group", "id": "cid_team", "respondentUserIds": ["staff_b", "staff_c"]}
    outcome, details = create(agent, session, {"fields": FIELDS, "title": "周报", "target": target})

    reply = send(outcome.ask, {"note": LONG, "nickname": "x"}, user_id="staff_b")

    private = reply["userPrivateData"]["cardParamMap"]
    assert private["user_notice"] == "" and card_values_fit(private)
    assert private["question_desc"].startswith("你已提交：这一行稍长些") and SHORTENED_MARK in private["question_desc"]
    row = Respondent.objects.get(ask=outcome.ask, respondent_id="staff_b")
    assert row.answers["answers"][0] == {"question": "说明", "answer": LONG}
    responded = AskEvent.objects.get(ask=outcome.ask, kind="responded")
    assert responded.detail == {"respondent_status": "submitted", "dropped_fields": ["nickname"],
                                "dropped_fields_count": 1}
    # The last response ends it: the result the agent reads (wrapped as untrusted data) has it whole.
    click(bot, outcome.ask, "staff_c", cancel=True)
    message = Ask.objects.get(pk=outcome.ask.pk).result["message"]
    assert json.dumps(LONG, ensure_ascii=False) in message


# --------------------------------------------------------------------- checked like the panel


@pytest.mark.parametrize("attack", ATTACKS, ids=ATTACK_IDS)
def test_a_signed_callback_is_checked_as_the_panel_checks_it(agent, session, send, attack):  # noqa: F811
    _, form, why, recorded, audited = attack
    outcome, _ = create(agent, session, {"fields": FIELDS})
    events = AskEvent.objects.filter(ask=outcome.ask).count()

    reply = send(outcome.ask, form)

    if why is not None:
        assert notice(reply) == REFUSED + why
        assert unchanged(outcome.ask, events)
        return
    assert notice(reply) == ""
    ask = Ask.objects.get(pk=outcome.ask.pk)
    assert (ask.status, ask.reason) == ("answered", "submitted")
    assert answers_of(ask) == recorded
    assert AskEvent.objects.get(ask=ask, kind="closed").detail == {"reason": "submitted", **audited}


# ------------------------------------------------------------------------------- the panel


@pytest.fixture
def world(settings, agent):
    """alice's DingTalk conversation (she is staff_a there), shown on the card and her panel."""
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.web.WebSurface",
                                  "askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    with FakeDingTalk() as server:
        bot = make_bot(server)  # noqa: F811
        grant_bot(agent, bot)
        session, _ = services.session_upsert(  # noqa: F811
            agent=agent, key="dingtalk/dm/staff_a", platform="dingtalk", bot=bot, chat_type="p2p", user_id="staff_a",
            user_name="成员甲", web_user="alice",
        )
        yield {"agent": agent, "session": session, "fake": server, "alice": person("alice")}


def _world_form(world):
    try:
        outcome, details = create(world["agent"], world["session"], {"fields": FIELDS})
        return outcome.ask, details
    finally:
        connections.close_all()


@pytest.mark.asyncio
@pytest.mark.parametrize("attack", ATTACKS, ids=ATTACK_IDS)
async def test_the_panel_answers_each_attack_as_the_card_does(world, attack):
    _, form, why, recorded, audited = attack
    panel = await _panel(world["alice"])
    ask, _ = await database_sync_to_async(_world_form)(world)
    await _next(panel, "dingtalk_form")

    ack = await _submit(panel, ask.id, form)

    if why is not None:
        assert (ack["ok"], ack["error"]) == (False, f"invalid: {why}")
        state = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
        assert state.status == "pending"
    else:
        assert ack["ok"], ack
        assert {item["question"]: item["answer"] for item in ack["answers"]} == recorded
        closed = await database_sync_to_async(AskEvent.objects.get)(ask_id=ask.id, kind="closed")
        assert closed.detail == {"reason": "submitted", **audited}
    await panel.disconnect()


@pytest.mark.asyncio
async def test_a_long_panel_answer_reaches_the_agent_whole_and_the_card_within_budget(world):
    panel = await _panel(world["alice"])
    ask, details = await database_sync_to_async(_world_form)(world)
    await _next(panel, "dingtalk_form")

    ack = await _submit(panel, ask.id, {"note": LONG})

    assert ack["ok"] and ack["answers"][0] == {"question": "说明", "answer": LONG}  # the person's own, whole
    state = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert f"  - 说明: {LONG}\n" in state.result["message"]
    await database_sync_to_async(sync_cards)()
    put = world["fake"].cards[details["outTrackId"]].updates[-1]
    assert card_values_fit(put) and put["selected_text"].endswith(SHORTENED_MARK)
    assert await database_sync_to_async(CardMessage.objects.filter(ask_id=ask.id, last_error="").exists)()
    await panel.disconnect()
