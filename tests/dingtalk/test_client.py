"""The DingTalk OpenAPI client against the fake DingTalk server (real HTTP)."""
from __future__ import annotations

import logging
import time

import pytest
import requests

from askcards.surfaces.dingtalk.client import (
    CARD_INSTANCES_PATH,
    CREATE_AND_DELIVER_PATH,
    REGISTER_CALLBACK_PATH,
    TOKEN_PATH,
    DeliveryError,
    DingTalkClient,
    DingTalkError,
)
from tests.fakes.dingtalk import FakeDingTalk

TEMPLATE = "c2a6355b-9724-4f7e-9653-d33fcb3311bb.schema"


def deliver(client, out_track_id="ask_1", space_kind="user", space_id="staff-1", **kwargs):
    return client.create_and_deliver(
        out_track_id=out_track_id, template_id=TEMPLATE, card_data=kwargs.pop("card_data", {"question_id": "q_1"}),
        space_kind=space_kind, space_id=space_id, **kwargs,
    )


# -- access token ----------------------------------------------------------------------------


def test_token_is_fetched_once_and_reused_from_the_cache(client, fake):
    deliver(client, "ask_1")
    deliver(client, "ask_2")
    client.update_card("ask_1", {"card_status": "submitted"})

    assert len(fake.requests_to(TOKEN_PATH)) == 1
    tokens = {r.headers["x-acs-dingtalk-access-token"] for r in fake.requests if r.path != TOKEN_PATH}
    assert tokens == {f for f in fake.tokens}


def test_token_request_sends_app_key_and_secret_as_json(client, fake):
    client.access_token()

    assert fake.requests_to(TOKEN_PATH)[0].json == {"appKey": fake.client_id, "appSecret": fake.client_secret}


def test_token_expiring_within_60_seconds_is_not_reused(sleeps):
    with FakeDingTalk(token_ttl=60) as fake:
        client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, sleep=sleeps)
        first, second = client.access_token(), client.access_token()

    assert first != second
    assert len(fake.requests_to(TOKEN_PATH)) == 2


def test_token_with_more_than_60_seconds_left_is_reused(sleeps):
    with FakeDingTalk(token_ttl=61) as fake:
        client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, sleep=sleeps)
        assert client.access_token() == client.access_token()


def test_a_token_cache_outage_costs_one_token_request_not_one_per_call(client, fake, flaky_cache):
    flaky_cache.down = True

    deliver(client, "ask_1")
    for status in ("submitted", "expired"):
        client.update_card("ask_1", {"card_status": status})
    other = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, sleep=lambda s: None)
    deliver(other, "ask_2")  # another client of the app in this process (another thread's)

    assert flaky_cache.calls_refused > 0
    assert len(fake.requests_to(TOKEN_PATH)) == 1
    assert fake.card_params("ask_1")["card_status"] == "expired"


def test_a_token_cache_outage_is_logged_once_and_never_with_the_token(client, fake, flaky_cache, caplog):
    caplog.set_level(logging.DEBUG)
    flaky_cache.down = True

    deliver(client, "ask_1")
    client.update_card("ask_1", {"card_status": "submitted"})
    client.update_card("ask_1", {"card_status": "expired"})

    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and fake.client_id in warnings[0] and "ConnectionError" in warnings[0]
    for token in fake.tokens:
        assert token not in caplog.text


def test_tokens_are_cached_again_once_the_cache_is_back(client, fake, flaky_cache, caplog):
    flaky_cache.down = True
    deliver(client, "ask_1")
    flaky_cache.down = False

    client.update_card("ask_1", {"card_status": "submitted"})
    client.update_card("ask_1", {"card_status": "expired"})
    flaky_cache.down = True
    client.update_card("ask_1", {"card_status": "cancelled"})

    # The outage's, then the (empty) cache's first miss; the second outage uses this process's copy.
    assert len(fake.requests_to(TOKEN_PATH)) == 2
    assert sum("token cache read failed" in r.getMessage() for r in caplog.records) == 2  # once per outage
    assert fake.card_params("ask_1")["card_status"] == "cancelled"


def test_a_token_is_not_used_within_60_seconds_of_its_expiry_while_the_cache_is_down(sleeps, flaky_cache):
    now = [1000.0]
    with FakeDingTalk(token_ttl=120) as fake:
        client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, sleep=sleeps,
                                clock=lambda: now[0])
        flaky_cache.down = True
        first = client.access_token()
        now[0] += 59
        assert client.access_token() == first
        now[0] += 2
        second = client.access_token()

    assert second != first
    assert len(fake.requests_to(TOKEN_PATH)) == 2


def test_token_cached_for_one_app_is_not_used_for_another(client, fake):
    client.access_token()
    other = DingTalkClient("ding-other-app", "wrong", base_url=fake.base_url, sleep=lambda s: None)

    with pytest.raises(DingTalkError) as raised:
        other.access_token()

    assert raised.value.code == "invalidClientIdOrSecret"


def test_wrong_client_secret_fails_at_once_without_echoing_the_secret(fake, sleeps):
    client = DingTalkClient(fake.client_id, "not-the-secret", base_url=fake.base_url, sleep=sleeps)

    with pytest.raises(DingTalkError) as raised:
        deliver(client)

    assert raised.value.code == "invalidClientIdOrSecret"
    assert raised.value.permanent
    assert "not-the-secret" not in str(raised.value)
    assert len(fake.requests_to(TOKEN_PATH)) == 1 and sleeps == []


def test_revoked_token_is_replaced_once_and_the_call_succeeds(client, fake):
    deliver(client, "ask_1")
    fake.revoke_tokens()

    assert client.update_card("ask_1", {"card_status": "expired"}) is True
    assert len(fake.requests_to(TOKEN_PATH)) == 2
    assert fake.card_params("ask_1")["card_status"] == "expired"


def test_revoked_token_is_replaced_even_with_a_single_attempt(fake, sleeps):
    # The card-sync lane's clients try once: a refused token is not a failed attempt.
    client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, max_attempts=1, sleep=sleeps)
    deliver(client, "ask_1")
    fake.revoke_tokens()

    assert client.update_card("ask_1", {"card_status": "expired"}) is True
    assert fake.card_params("ask_1")["card_status"] == "expired" and sleeps == []


# -- createAndDeliver ------------------------------------------------------------------------


def test_dm_card_goes_to_the_robot_chat_of_the_user(client, fake):
    delivery = deliver(client, "ask_dm", "user", "staff-42")

    body = fake.requests_to(CREATE_AND_DELIVER_PATH)[0].json
    assert body["openSpaceId"] == "dtv1.card//IM_ROBOT.staff-42"
    assert body["imRobotOpenDeliverModel"] == {
        "spaceType": "IM_ROBOT", "robotCode": fake.client_id, "extension": {"dynamicSummary": "true"},
    }
    assert "imGroupOpenDeliverModel" not in body
    assert body["imRobotOpenSpaceModel"] == {"supportForward": True}
    assert body["cardTemplateId"] == TEMPLATE and body["outTrackId"] == "ask_dm" and body["userIdType"] == 1
    assert delivery.results[0]["spaceType"] == "IM_ROBOT" and delivery.results[0]["success"] is True


def test_group_card_goes_to_the_conversation(client, fake):
    delivery = deliver(client, "ask_group", "group", "cidAbC==")

    body = fake.requests_to(CREATE_AND_DELIVER_PATH)[0].json
    assert body["openSpaceId"] == "dtv1.card//IM_GROUP.cidAbC=="
    assert body["imGroupOpenDeliverModel"] == {"robotCode": fake.client_id, "extension": {"dynamicSummary": "true"}}
    assert "imRobotOpenDeliverModel" not in body
    assert delivery.open_space_id == "dtv1.card//IM_GROUP.cidAbC=="


def test_targeted_card_cannot_be_forwarded(client, fake):
    deliver(client, "ask_t", "group", "cid1", support_forward=False)

    body = fake.requests_to(CREATE_AND_DELIVER_PATH)[0].json
    assert body["imGroupOpenSpaceModel"] == {"supportForward": False}
    assert body["imRobotOpenSpaceModel"] == {"supportForward": False}


def test_card_calls_back_over_stream_unless_a_route_key_is_given(client, fake):
    client.register_callback("https://askcards.example/callbacks/dingtalk/app/", "api-secret")
    deliver(client, "ask_stream")
    deliver(client, "ask_http", callback_route_key=client.default_route_key)

    stream, http = (r.json for r in fake.requests_to(CREATE_AND_DELIVER_PATH))
    assert stream["callbackType"] == "STREAM" and "callbackRouteKey" not in stream
    assert http["callbackType"] == "HTTP" and http["callbackRouteKey"] == f"askcards-{fake.client_id}"


def test_every_card_variable_is_sent_as_a_string(client, fake):
    deliver(client, card_data={
        "question_id": "q_1", "count": 3, "ratio": 1.0, "flag": True, "missing": None,
        "form": {"fields": [{"name": "a", "label": "甲", "type": "TEXT", "required": True}]},
    })

    params = fake.card_params("ask_1")
    assert params == {
        "question_id": "q_1", "count": "3", "ratio": "1", "flag": "true", "missing": "",
        "form": '{"fields":[{"name":"a","label":"甲","type":"TEXT","required":true}]}',
    }


def test_a_failed_deliver_result_raises_an_error_naming_the_space(client, fake):
    fake.fail_delivery("cid-closed", "机器人不在群内")

    with pytest.raises(DeliveryError) as raised:
        deliver(client, "ask_x", "group", "cid-closed")

    assert "IM_GROUP cid-closed: 机器人不在群内" in str(raised.value)
    assert "ask_x" in str(raised.value)
    assert [entry["spaceId"] for entry in raised.value.failed] == ["cid-closed"]


def test_a_failed_entry_without_message_uses_the_reference_text(fake, sleeps):
    fake.fail_delivery("staff-9", "")
    client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, sleep=sleeps)

    with pytest.raises(DeliveryError, match="IM_ROBOT staff-9: DingTalk question card delivery failed"):
        deliver(client, "ask_y", "user", "staff-9")


@pytest.mark.parametrize("space_id", ["", "cid 1", "cid1;IM_GROUP.other", "staff\n1"])
def test_an_id_that_would_change_the_space_is_refused_before_any_request(client, fake, space_id):
    with pytest.raises(DingTalkError) as raised:
        deliver(client, space_kind="group", space_id=space_id)

    assert raised.value.code == "invalid_request"
    assert fake.requests_to(CREATE_AND_DELIVER_PATH) == []


def test_a_card_created_by_a_timed_out_attempt_counts_as_delivered(fake):
    fake.slow(CREATE_AND_DELIVER_PATH, 1.0)

    def wait_until_created(seconds):
        deadline = time.monotonic() + 5
        while "ask_slow" not in fake.cards and time.monotonic() < deadline:
            time.sleep(0.02)

    client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, timeout=0.3,
                            sleep=wait_until_created)
    delivery = deliver(client, "ask_slow")

    assert delivery.already_existed
    assert len(fake.requests_to(CREATE_AND_DELIVER_PATH)) == 2
    assert len(fake.cards) == 1


def test_reusing_an_out_track_id_is_an_error_when_no_attempt_was_lost(client):
    deliver(client, "ask_dup")

    with pytest.raises(DingTalkError) as raised:
        deliver(client, "ask_dup")

    assert raised.value.code == "param.cardAlreadyExist"


# -- card update -----------------------------------------------------------------------------


def test_update_sends_only_the_changed_keys_as_strings_merged_by_key(client, fake):
    deliver(client, card_data={"question_id": "q_1", "card_status": "pending", "form_btn_text": "提交"})

    client.update_card("ask_1", {"form_btn_text": "1/3", "progress": 1})

    body = fake.requests_to(CARD_INSTANCES_PATH, "PUT")[0].json
    assert body == {
        "outTrackId": "ask_1",
        "cardData": {"cardParamMap": {"form_btn_text": "1/3", "progress": "1"}},
        "cardUpdateOptions": {"updateCardDataByKey": True},
    }
    assert fake.card_params("ask_1") == {
        "question_id": "q_1", "card_status": "pending", "form_btn_text": "1/3", "progress": "1",
    }


def test_update_with_nothing_changed_sends_nothing(client, fake):
    assert client.update_card("ask_1", {}) is False
    assert fake.requests == []


def test_update_of_an_unknown_card_fails_without_retrying(client, sleeps):
    with pytest.raises(DingTalkError) as raised:
        client.update_card("ask_missing", {"card_status": "expired"})

    assert raised.value.code == "param.cardNotExist" and raised.value.status == 400
    assert sleeps == []


def test_fake_rejects_non_string_card_values_like_dingtalk(client, fake):
    deliver(client)
    headers = {"x-acs-dingtalk-access-token": client.access_token()}

    reply = requests.put(fake.base_url + CARD_INSTANCES_PATH, headers=headers, timeout=5, json={
        "outTrackId": "ask_1", "cardData": {"cardParamMap": {"card_status": "expired", "count": 1}},
    })

    assert reply.status_code == 400 and reply.json()["code"] == "param.invalid"
    assert fake.card_params("ask_1")["question_id"] == "q_1"


# -- callback registration -------------------------------------------------------------------


def test_register_binds_the_app_route_key_to_the_url_and_secret(client, fake):
    registration = client.register_callback("https://askcards.example/cb/", "api-secret-1")

    body = fake.requests_to(REGISTER_CALLBACK_PATH)[0].json
    assert body == {"callbackRouteKey": f"askcards-{fake.client_id}", "callbackUrl": "https://askcards.example/cb/",
                    "apiSecret": "api-secret-1", "forceUpdate": False}
    assert registration.callback_url == "https://askcards.example/cb/" and registration.secret_matches is True


def test_register_without_force_keeps_an_existing_registration(client):
    client.register_callback("https://old.example/cb/", "old-secret")

    kept = client.register_callback("https://new.example/cb/", "new-secret")
    forced = client.register_callback("https://new.example/cb/", "new-secret", force_update=True)

    assert (kept.callback_url, kept.secret_matches) == ("https://old.example/cb/", False)
    assert (forced.callback_url, forced.secret_matches) == ("https://new.example/cb/", True)


# -- retries and errors ----------------------------------------------------------------------


def test_qps_limit_is_waited_out_and_retried(client, fake, sleeps):
    fake.qps_limit(CREATE_AND_DELIVER_PATH, times=2)

    delivery = deliver(client)

    assert delivery.results[0]["success"] is True
    assert sleeps == [1.0, 1.0]
    assert len(fake.requests_to(CREATE_AND_DELIVER_PATH)) == 3


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried_with_growing_backoff(client, fake, sleeps, status):
    deliver(client)
    fake.server_error(CARD_INSTANCES_PATH, status=status, times=2)

    client.update_card("ask_1", {"card_status": "submitted"})

    assert sleeps == [0.5, 1.0]
    assert fake.card_params("ask_1")["card_status"] == "submitted"


def test_retries_stop_after_max_attempts_with_a_retryable_error(client, fake, sleeps):
    deliver(client)
    fake.server_error(CARD_INSTANCES_PATH, status=503, times=10)

    with pytest.raises(DingTalkError) as raised:
        client.update_card("ask_1", {"card_status": "submitted"})

    assert raised.value.status == 503 and raised.value.permanent is False
    assert len(fake.requests_to(CARD_INSTANCES_PATH, "PUT")) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_qps_limit_on_the_token_endpoint_is_retried_too(client, fake, sleeps):
    fake.qps_limit(TOKEN_PATH)

    assert client.access_token()
    assert sleeps == [1.0]


def test_permission_403_is_not_mistaken_for_throttling(client, fake, sleeps):
    fake.fail(CREATE_AND_DELIVER_PATH, status=403, code="Forbidden.AccessDenied.AccessTokenPermissionDenied",
              message="没有调用该接口的权限")

    with pytest.raises(DingTalkError) as raised:
        deliver(client)

    assert raised.value.code == "Forbidden.AccessDenied.AccessTokenPermissionDenied"
    assert "没有调用该接口的权限" in str(raised.value)
    assert raised.value.permanent and sleeps == []


def test_error_carries_code_message_and_request_id(client, fake):
    fake.fail(CREATE_AND_DELIVER_PATH, status=400, code="param.contentUnsafe", message="内容不安全")

    with pytest.raises(DingTalkError) as raised:
        deliver(client)

    error = raised.value
    assert (error.status, error.code, error.message.count("内容不安全")) == (400, "param.contentUnsafe", 1)
    assert error.request_id.startswith("fake-req-")


def test_a_param_error_sent_as_500_is_not_retried(client, fake, sleeps):
    fake.fail(REGISTER_CALLBACK_PATH, status=500, code="param.callbackRouteKeyExist", message="exists")

    with pytest.raises(DingTalkError):
        client.register_callback("https://askcards.example/cb/", "secret")

    assert sleeps == []


def test_a_slow_answer_times_out_and_is_retried(client, fake, sleeps):
    deliver(client)
    fast = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, timeout=0.3, sleep=sleeps)
    fake.slow(CARD_INSTANCES_PATH, 1.0)

    assert fast.update_card("ask_1", {"card_status": "cancelled"}) is True
    assert len(fake.requests_to(CARD_INSTANCES_PATH, "PUT")) == 2


def test_a_server_that_never_answers_fails_in_bounded_time(fake, sleeps):
    fake.slow(TOKEN_PATH, 5.0, times=10)
    client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, timeout=0.2,
                            max_attempts=2, sleep=sleeps)
    started = time.monotonic()

    with pytest.raises(DingTalkError) as raised:
        client.access_token()

    assert time.monotonic() - started < 2
    assert raised.value.permanent is False and "did not answer" in str(raised.value)


def test_nothing_secret_or_from_the_card_reaches_the_logs(fake, sleeps, caplog):
    caplog.set_level(logging.DEBUG)
    client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url, sleep=sleeps)
    fake.qps_limit(CREATE_AND_DELIVER_PATH)
    fake.server_error(CARD_INSTANCES_PATH, times=1)

    deliver(client, card_data={"question_id": "q_1", "form": {"fields": [{"label": "秘密答案-xyz"}]}})
    client.update_card("ask_1", {"selected_text": "我的回答-abc"})
    client.register_callback("https://askcards.example/cb/", "api-secret-qwe")

    token = next(iter(fake.tokens))
    for secret in (fake.client_secret, token, "api-secret-qwe", "秘密答案-xyz", "我的回答-abc"):
        assert secret not in caplog.text
    assert "retrying" in caplog.text
    assert fake.client_secret not in repr(client)


def test_success_false_in_a_200_body_is_an_error(client, fake):
    fake.fail(CARD_INSTANCES_PATH, status=200, body={"success": False, "code": "system.error", "message": "x"})

    with pytest.raises(DingTalkError, match="system.error"):
        client.update_card("ask_1", {"a": "b"})


def test_token_response_without_a_token_is_an_error(client, fake):
    fake.fail(TOKEN_PATH, status=200, body={"expireIn": 7200})

    with pytest.raises(DingTalkError, match="accessToken"):
        client.access_token()

