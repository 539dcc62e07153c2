"""The fake server refuses what Feishu refuses, so passing tests mean cards Feishu would accept."""
from __future__ import annotations

import copy
import json

import pytest
import requests

from askcards.surfaces.feishu.cards import dumps_card, render_progress_card
from askcards.surfaces.feishu.client import FeishuError
from tests.fakes.feishu import CardRejected, check_card

from .helpers import big_ask, forms, pending, question, view


def _card():
    return copy.deepcopy(render_progress_card(view(asks=(pending(1, [question(), question(multi=True)]),))).card)


def _refusal(card) -> str:
    with pytest.raises(CardRejected) as excinfo:
        check_card(dumps_card(card))
    return excinfo.value.msg


@pytest.mark.parametrize(
    "rendered_view",
    [
        view(asks=(pending(1), pending(2, [question(multi=True)] * 4)), detail_url="https://example.com/d"),
        view(asks=tuple(big_ask(n) for n in range(4)), content="进度" * 4000, panel_url="https://a.example/p/"),
        view(asks=tuple(pending(n, [question(labels=("A", "B", "C", "D"))] * 4) for n in range(9))),
        view("recovering", asks=(pending(1),)),
        view("completed", detail_url="https://example.com/d"),
        view("failed"),
        view("cancelled", content=""),
    ],
    ids=["two-asks", "four-big-asks", "nine-asks", "recovering", "completed", "failed", "cancelled"],
)
def test_every_builder_card_is_sent_and_patched_by_the_strict_fake(fake_feishu, client, rendered_view):
    card = render_progress_card(rendered_view).card
    message = client.send_card("chat_id", "oc_1", card, "u1")
    client.patch_card(message.message_id, card)
    assert fake_feishu.rejections == []
    assert fake_feishu.messages[message.message_id].cards == [card, card]


def test_fake_rejects_unknown_properties():
    card = _card()
    forms(card)[0]["elements"][-1]["size"] = "sm"  # mao's value, not in the enum
    assert "button.size 'sm'" in _refusal(card)
    card = _card()
    forms(card)[0]["elements"][1]["colour"] = "red"
    assert "unknown property 'colour' on select_static" in _refusal(card)


def test_fake_rejects_duplicate_names_across_forms():
    card = render_progress_card(view(asks=(pending(1), pending(2)))).card
    forms(card)[1]["elements"][1]["name"] = "q0_0"
    assert "'q0_0' is used twice" in _refusal(card)


def test_fake_rejects_an_unnamed_component_in_a_form():
    card = _card()
    del forms(card)[0]["elements"][2]["name"]
    assert "200530" in _refusal(card)


def test_fake_rejects_a_form_without_submit_button():
    card = _card()
    forms(card)[0]["elements"].pop()
    assert "no button with form_action_type submit" in _refusal(card)


def test_fake_rejects_multi_select_outside_a_form_and_nested_forms():
    card = _card()
    multi = forms(card)[0]["elements"][4]
    card["body"]["elements"].append(copy.deepcopy({**multi, "name": "loose"}))
    assert "only be used inside a form" in _refusal(card)
    card = _card()
    card["body"]["elements"][-1]["columns"][0]["elements"].append({"tag": "form", "name": "f", "elements": []})
    assert "column cannot contain a form" in _refusal(card)


def test_fake_rejects_string_callback_values_and_non_string_option_values():
    card = _card()
    forms(card)[0]["elements"][-1]["behaviors"][0]["value"] = "feishu_ask"
    assert "must be an object" in _refusal(card)
    card = _card()
    forms(card)[0]["elements"][1]["options"][0]["value"] = 0
    assert "option.value must be a string" in _refusal(card)


def test_fake_rejects_cards_over_30kb_and_over_200_elements():
    card = _card()
    card["body"]["elements"].append({"tag": "markdown", "content": "x" * 31_000})
    with pytest.raises(CardRejected) as excinfo:
        check_card(json.dumps(card))
    assert excinfo.value.code == 230025
    card = _card()
    card["body"]["elements"] += [{"tag": "hr"}] * 200
    assert "more than 200" in _refusal(card)


def test_fake_rejects_a_patch_onto_a_card_sent_without_update_multi(fake_feishu, client):
    legacy = _card()
    del legacy["config"]["update_multi"]
    message = client.send_card("chat_id", "oc_1", legacy, "legacy")
    with pytest.raises(FeishuError, match="update_multi"):
        client.patch_card(message.message_id, _card())


def test_fake_rejects_a_patch_without_update_multi(fake_feishu, client):
    message = client.send_card("chat_id", "oc_1", _card(), "u")
    new = _card()
    del new["config"]["update_multi"]
    with pytest.raises(FeishuError, match="update_multi"):
        client.patch_card(message.message_id, new)


def test_fake_enforces_five_patches_per_second_per_message(fake_feishu, client, clock):
    first = client.send_card("chat_id", "oc_1", _card(), "a")
    second = client.send_card("chat_id", "oc_1", _card(), "b")
    fake_feishu.patch_qps = 5
    client.max_attempts = 1
    for _ in range(5):
        client.patch_card(first.message_id, _card())
    with pytest.raises(FeishuError) as excinfo:
        client.patch_card(first.message_id, _card())
    assert excinfo.value.code == 230020
    client.patch_card(second.message_id, _card())  # the limit is per message
    clock.sleep(1.0)
    client.patch_card(first.message_id, _card())


def test_fake_rejects_cards_updated_with_put(fake_feishu, client):
    message = client.send_card("chat_id", "oc_1", _card(), "a")
    response = requests.put(f"{fake_feishu.base_url}/open-apis/im/v1/messages/{message.message_id}",
                            json={"msg_type": "interactive", "content": "{}"},
                            headers={"Authorization": f"Bearer {client.tenant_token()}"}, timeout=2)
    assert response.json()["code"] == 230001
