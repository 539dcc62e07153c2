"""A platform callback's event id is accepted once (``services.callback_receipt``)."""
from __future__ import annotations

from django.db import transaction

from askcards import services
from askcards.models import CallbackReceipt


def test_callback_receipt_accepts_an_event_id_once(db):
    assert services.callback_receipt(platform="feishu", event_id="ev_1") is True
    assert services.callback_receipt(platform="feishu", event_id="ev_1") is False
    assert CallbackReceipt.objects.filter(event_id="ev_1").count() == 1


def test_callback_receipt_keeps_platforms_apart(db):
    assert services.callback_receipt(platform="feishu", event_id="ev_1")
    assert services.callback_receipt(platform="dingtalk", event_id="ev_1")


def test_callback_receipt_of_a_long_id_dedupes_on_its_stored_prefix(db):
    assert services.callback_receipt(platform="dingtalk", event_id="signature:" + "a" * 300)
    assert not services.callback_receipt(platform="dingtalk", event_id="signature:" + "a" * 290 + "b" * 10)


def test_callback_receipt_duplicate_leaves_the_callers_transaction_usable(db):
    services.callback_receipt(platform="feishu", event_id="ev_1")
    with transaction.atomic():  # as the callback handlers call it
        assert not services.callback_receipt(platform="feishu", event_id="ev_1")
        assert services.callback_receipt(platform="feishu", event_id="ev_2")
    assert set(CallbackReceipt.objects.values_list("event_id", flat=True)) == {"ev_1", "ev_2"}
