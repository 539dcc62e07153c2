from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings

from askcards.surfaces import http
from askcards.surfaces.feishu.cards import render_progress_card
from askcards.surfaces.feishu.client import FEISHU_BASE_URL, FeishuClient, FeishuError
from tests.fakes.feishu import MESSAGES_PATH, FakeFeishu

from .helpers import pending, question, view

CARD = render_progress_card(view(asks=(pending(1, [question("Secret plan: which colour?")]),))).card
DONE = render_progress_card(view("completed")).card


def _sent(client, uuid="send-1"):
    return client.send_card("chat_id", "oc_group", CARD, uuid)


# --- tenant token --------------------------------------------------------------------------------


def test_token_is_fetched_once_and_shared_by_clients_of_the_same_app(fake_feishu, client):
    _sent(client, "a")
    other = FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    other.send_card("chat_id", "oc_group", CARD, "b")
    assert len(fake_feishu.token_requests) == 1
    tokens = {r.headers["authorization"] for r in fake_feishu.calls("POST", MESSAGES_PATH)}
    assert len(tokens) == 1 and tokens.pop().startswith("Bearer t-")


def test_token_is_cached_until_twenty_minutes_before_expiry(fake_feishu, client, monkeypatch):
    timeouts = []

    class RecordingCache:
        def __getattr__(self, name):
            return getattr(cache, name)

        def set(self, key, value, timeout=None):
            timeouts.append(timeout)
            cache.set(key, value, timeout=timeout)

    monkeypatch.setattr(http, "cache", RecordingCache())
    client.tenant_token()
    client.tenant_token()
    assert timeouts == [7200 - 20 * 60]
    assert len(fake_feishu.token_requests) == 1


def test_token_expiring_within_the_margin_is_not_reused(clock):
    with FakeFeishu(token_ttl=15 * 60, clock=clock.now) as fake:
        client = FeishuClient(fake.app_id, fake.app_secret, fake.base_url)
        client.patch_card(_sent(client, "a").message_id, DONE)
        assert len(fake.token_requests) == 2


def test_expired_token_is_refreshed_and_the_call_retried(fake_feishu, client):
    message = _sent(client)
    fake_feishu.expire_tokens()
    client.patch_card(message.message_id, DONE)
    assert len(fake_feishu.token_requests) == 2
    assert [r.code for r in fake_feishu.calls("PATCH")] == [99991663, 0]
    assert fake_feishu.messages[message.message_id].card == DONE


def test_missing_token_code_also_refreshes(fake_feishu, client):
    message = _sent(client)
    fake_feishu.fail(code=99991661, path=MESSAGES_PATH)
    client.patch_card(message.message_id, DONE)
    assert len(fake_feishu.token_requests) == 2


def test_token_is_refreshed_only_once_per_call(fake_feishu, client, clock):
    message = _sent(client)
    fake_feishu.fail(code=99991663, times=2, path=MESSAGES_PATH)
    with pytest.raises(FeishuError) as excinfo:
        client.patch_card(message.message_id, DONE)
    assert excinfo.value.code == 99991663 and excinfo.value.permanent
    assert len(fake_feishu.token_requests) == 2 and len(fake_feishu.calls("PATCH")) == 2
    assert clock.sleeps == []


def test_wrong_app_secret_fails_at_once_without_leaking_it(fake_feishu):
    client = FeishuClient(fake_feishu.app_id, "not-the-secret", fake_feishu.base_url)
    with pytest.raises(FeishuError) as excinfo:
        _sent(client)
    assert excinfo.value.code == 10015 and not excinfo.value.retryable
    assert "not-the-secret" not in str(excinfo.value) and "not-the-secret" not in repr(client)
    assert len(fake_feishu.requests) == 1


def test_a_token_cache_outage_costs_one_token_request_not_one_per_call(fake_feishu, client, clock, flaky_cache):
    flaky_cache.down = True

    message = _sent(client)
    for _ in range(4):  # Feishu refuses a sixth PATCH of a message within a second
        client.patch_card(message.message_id, DONE)
    # Another client of the same app in this process (another thread's) has it too. It shares the
    # process's clock, as every client does outside tests (time.monotonic; the fake one here).
    other = FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url, clock=clock.now)
    other.patch_card(message.message_id, CARD)

    assert flaky_cache.calls_refused > 0
    assert len(fake_feishu.token_requests) == 1
    assert [r.code for r in fake_feishu.calls("PATCH")] == [0] * 5
    assert fake_feishu.messages[message.message_id].card == CARD


def test_a_token_cache_outage_is_logged_once_and_never_with_the_token(fake_feishu, client, flaky_cache, caplog):
    caplog.set_level(logging.DEBUG)
    flaky_cache.down = True

    message = _sent(client)
    client.patch_card(message.message_id, DONE)
    client.patch_card(message.message_id, CARD)

    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and fake_feishu.app_id in warnings[0] and "ConnectionError" in warnings[0]
    tokens = {r.headers["authorization"].split()[1] for r in fake_feishu.calls(path=MESSAGES_PATH)}
    assert len(tokens) == 1
    for token in tokens:
        assert token not in caplog.text


def test_tokens_are_cached_again_once_the_cache_is_back(fake_feishu, client, flaky_cache, caplog):
    flaky_cache.down = True
    message = _sent(client)
    flaky_cache.down = False

    client.patch_card(message.message_id, DONE)
    client.patch_card(message.message_id, CARD)
    flaky_cache.down = True
    client.patch_card(message.message_id, DONE)

    # The outage's, then the (empty) cache's first miss; the second outage uses this process's copy.
    assert len(fake_feishu.token_requests) == 2
    assert sum("token cache read failed" in r.getMessage() for r in caplog.records) == 2  # once per outage
    assert fake_feishu.messages[message.message_id].card == DONE


def test_a_token_is_not_used_past_its_expiry_while_the_cache_is_down(clock, flaky_cache):
    # A token valid for 25 minutes is kept for 5 (Feishu's 20-minute margin), here as in the cache.
    with FakeFeishu(token_ttl=25 * 60, clock=clock.now) as fake:
        client = FeishuClient(fake.app_id, fake.app_secret, fake.base_url, sleep=clock.sleep, clock=clock.now)
        flaky_cache.down = True
        message = _sent(client)
        clock.sleep(5 * 60 - 1)
        client.patch_card(message.message_id, DONE)
        assert len(fake.token_requests) == 1
        clock.sleep(2)
        client.patch_card(message.message_id, CARD)
        clock.sleep(25 * 60 - 1)  # the second token's own expiry, a second away: not used either
        client.patch_card(message.message_id, DONE)

        assert len(fake.token_requests) == 3
        assert [r.code for r in fake.calls("PATCH")] == [0, 0, 0]  # never an expired token


def test_a_token_refused_during_an_outage_is_not_used_again(fake_feishu, client, flaky_cache):
    flaky_cache.down = True
    message = _sent(client)
    fake_feishu.expire_tokens()  # revoked early: Feishu refuses it before its expiry

    client.patch_card(message.message_id, DONE)
    client.patch_card(message.message_id, CARD)

    assert len(fake_feishu.token_requests) == 2
    assert [r.code for r in fake_feishu.calls("PATCH")] == [99991663, 0, 0]
    assert fake_feishu.messages[message.message_id].card == CARD


def test_a_redis_that_stops_answering_costs_one_timeout_not_a_hung_push(fake_feishu, client, monkeypatch):
    from tests.fakes.cache import silent_server

    monkeypatch.setattr(http, "_outage", http._CacheOutage())
    monkeypatch.setattr(http, "_local_tokens", http._LocalTokens())
    done: list[float] = []
    with silent_server() as port, override_settings(CACHES={"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": f"redis://127.0.0.1:{port}/11",
        "OPTIONS": settings.REDIS_CACHE_OPTIONS,  # the service's own, as with REDIS_URL
    }}):

        def pushes() -> None:
            started = time.monotonic()
            message = _sent(client)
            client.patch_card(message.message_id, DONE)
            client.patch_card(message.message_id, CARD)
            done.append(time.monotonic() - started)

        thread = threading.Thread(target=pushes, daemon=True)
        thread.start()
        thread.join(20)

    assert done, "the pushes still hang on the silent cache after 20 s"
    # One read timed out (1 s); the write and the next reads left the cache alone for a while.
    assert done[0] < 3.5, f"three pushes took {done[0]:.1f} s"
    assert len(fake_feishu.token_requests) == 1
    assert [r.code for r in fake_feishu.calls("PATCH")] == [0, 0]


def test_a_failed_cache_is_tried_again_every_few_seconds_not_on_every_call(fake_feishu, client, clock, flaky_cache,
                                                                            monkeypatch):
    monkeypatch.setattr(http, "_outage", http._CacheOutage(retry_seconds=5, clock=clock.now))
    flaky_cache.down = True
    message = _sent(client)
    client.patch_card(message.message_id, DONE)
    assert flaky_cache.calls_refused == 1  # the first read; the write and the next read skipped it

    clock.sleep(5)
    client.patch_card(message.message_id, CARD)
    assert flaky_cache.calls_refused == 2

    flaky_cache.down = False
    clock.sleep(5)
    client.patch_card(message.message_id, DONE)  # the cache again: empty, so a token is fetched and shared
    other = FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    other.patch_card(message.message_id, CARD)
    assert len(fake_feishu.token_requests) == 2
    assert fake_feishu.messages[message.message_id].card == CARD


class BrokenCache:
    """A cache backend failing every call with ``error`` (what a Redis client may raise: refused,
    timed out, out of memory, a stored value it cannot read)."""

    def __init__(self, error: Exception):
        self.error = error
        self.calls = 0

    def _fail(self, *args, **kwargs):
        self.calls += 1
        raise self.error

    get = set = delete = _fail


@pytest.mark.parametrize("error", [
    ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    TimeoutError("Timeout reading from socket"),
    RuntimeError("OOM command not allowed when used memory > 'maxmemory'."),
    ValueError("unsupported pickle protocol: 9"),
], ids=lambda error: type(error).__name__)
def test_a_cache_error_never_breaks_a_push(fake_feishu, client, monkeypatch, error):
    broken = BrokenCache(error)
    monkeypatch.setattr(http, "cache", broken)
    monkeypatch.setattr(http, "_outage", http._CacheOutage())
    monkeypatch.setattr(http, "_local_tokens", http._LocalTokens())

    message = _sent(client)
    client.patch_card(message.message_id, DONE)
    fake_feishu.expire_tokens()
    client.patch_card(message.message_id, CARD)  # refused token: forgotten (the delete fails too)

    assert broken.calls > 0
    assert fake_feishu.messages[message.message_id].card == CARD
    assert len(fake_feishu.token_requests) == 2


def test_the_process_keeps_tokens_of_a_bounded_number_of_apps(fake_feishu, client, clock, flaky_cache, monkeypatch):
    monkeypatch.setattr(http, "_local_tokens", http._LocalTokens(limit=1))
    flaky_cache.down = True
    with FakeFeishu(clock=clock.now) as second_fake:
        second = FeishuClient(second_fake.app_id, second_fake.app_secret, second_fake.base_url)
        message = _sent(client)
        _sent(second)  # the second app's token takes the only place
        client.patch_card(message.message_id, DONE)
        client.patch_card(message.message_id, CARD)

        assert (len(fake_feishu.token_requests), len(second_fake.token_requests)) == (2, 1)
        assert fake_feishu.messages[message.message_id].card == CARD


def test_tokens_are_kept_apart_per_base_url(fake_feishu, client):
    with FakeFeishu(app_id=fake_feishu.app_id, app_secret=fake_feishu.app_secret) as lark:
        lark_client = FeishuClient(lark.app_id, lark.app_secret, lark.base_url + "/")
        _sent(client)
        _sent(lark_client)
        assert len(fake_feishu.token_requests) == 1 and len(lark.token_requests) == 1
        assert lark.calls("POST", MESSAGES_PATH)[0].code == 0


def test_default_base_url_is_feishu():
    assert FeishuClient("cli_x", "s").base_url == FEISHU_BASE_URL == "https://open.feishu.cn"


# --- messages ------------------------------------------------------------------------------------


def test_send_card_posts_the_card_as_a_json_string_with_uuid(fake_feishu, client):
    message = client.send_card("open_id", "ou_alice", CARD, "progress-s_1-1")
    (request,) = fake_feishu.calls("POST", MESSAGES_PATH)
    assert request.query == {"receive_id_type": "open_id"}
    assert request.json["msg_type"] == "interactive" and request.json["uuid"] == "progress-s_1-1"
    assert isinstance(request.json["content"], str) and json.loads(request.json["content"]) == CARD
    assert fake_feishu.messages[message.message_id].card == CARD
    assert message.chat_id


def test_same_uuid_sends_one_message(fake_feishu, client):
    first, second = _sent(client, "same"), _sent(client, "same")
    assert first == second and len(fake_feishu.messages) == 1


def test_timed_out_send_is_retried_with_the_same_uuid_and_creates_one_message(fake_feishu, clock):
    client = FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url,
                          timeout=0.2, sleep=clock.sleep, clock=clock.now)
    client.tenant_token()
    fake_feishu.fail(delay=0.4, path=MESSAGES_PATH)  # answered late: the send happens, the reply is lost
    message = _sent(client, "retry-me")
    sends = fake_feishu.calls("POST", MESSAGES_PATH)
    assert len(sends) == 2 and {r.json["uuid"] for r in sends} == {"retry-me"}
    for _ in range(40):  # let the late request finish on the server (bounded: 2 s)
        if all(r.status for r in sends):
            break
        time.sleep(0.05)
    assert [r.status for r in sends] == [200, 200]
    assert list(fake_feishu.messages) == [message.message_id]


def test_reply_card_replies_in_the_thread_with_uuid(fake_feishu, client):
    root = _sent(client)
    reply = client.reply_card(root.message_id, CARD, "reply-1", reply_in_thread=True)
    (request,) = fake_feishu.calls("POST", f"{MESSAGES_PATH}/{root.message_id}/reply")
    assert request.json["uuid"] == "reply-1" and request.json["reply_in_thread"] is True
    assert fake_feishu.messages[reply.message_id].reply_to == root.message_id


def test_patch_card_replaces_the_whole_card(fake_feishu, client):
    message = _sent(client)
    client.patch_card(message.message_id, DONE)
    (request,) = fake_feishu.calls("PATCH")
    assert json.loads(request.json["content"]) == DONE
    assert fake_feishu.messages[message.message_id].cards == [CARD, DONE]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda c: c.send_card("phone", "x", CARD, "u"), "receive_id_type"),
        (lambda c: c.send_card("open_id", "", CARD, "u"), "receive_id"),
        (lambda c: c.send_card("open_id", "ou_1", CARD, "u" * 51), "uuid"),
        (lambda c: c.send_card("open_id", "ou_1", CARD, ""), "uuid"),
        (lambda c: c.patch_card("", CARD), "message_id"),
    ],
)
def test_bad_arguments_fail_before_any_request(fake_feishu, client, call, message):
    with pytest.raises(ValueError, match=message):
        call(client)
    assert fake_feishu.requests == []


def test_platform_error_codes_are_raised_with_code_and_msg(fake_feishu, client):
    fake_feishu.fail(code=230002, msg="Bot is not in the chat", path=MESSAGES_PATH)
    with pytest.raises(FeishuError) as excinfo:
        _sent(client)
    error = excinfo.value
    assert (error.code, error.msg, error.http_status, error.permanent) == (230002, "Bot is not in the chat", 400, True)
    assert "230002" in str(error)
    assert len(fake_feishu.calls("POST", MESSAGES_PATH)) == 1


def test_http_200_with_a_non_zero_code_is_an_error(fake_feishu, client):
    fake_feishu.fail(status=200, code=230099, msg="card build failed", path=MESSAGES_PATH)
    with pytest.raises(FeishuError, match="code 230099"):
        _sent(client)


def test_card_over_30kb_is_refused_by_the_platform(fake_feishu, client):
    huge = {**DONE, "body": {"elements": [{"tag": "markdown", "content": "x" * 31_000}]}}
    with pytest.raises(FeishuError) as excinfo:
        client.send_card("chat_id", "oc_group", huge, "huge")
    assert excinfo.value.code == 230025 and excinfo.value.permanent


# --- retries -------------------------------------------------------------------------------------


def test_429_waits_for_the_rate_limit_reset_header(fake_feishu, client, clock):
    fake_feishu.fail(status=429, headers={"x-ogw-ratelimit-reset": "3"}, path=MESSAGES_PATH)
    _sent(client)
    assert clock.sleeps == [3.0]
    assert [r.status for r in fake_feishu.calls("POST", MESSAGES_PATH)] == [429, 200]


def test_patch_rate_limit_230020_is_retried_with_backoff(fake_feishu, client, clock):
    message = _sent(client)
    for _ in range(6):  # the sixth PATCH within one second is over Feishu's 5 per message
        client.patch_card(message.message_id, DONE)
    assert [r.code for r in fake_feishu.calls("PATCH")] == [0] * 5 + [230020, 230020, 0]
    assert clock.sleeps == [0.5, 1.0]
    assert len(fake_feishu.messages[message.message_id].cards) == 7


def test_server_errors_are_retried_with_exponential_backoff(fake_feishu, client, clock):
    message = _sent(client)
    fake_feishu.fail(status=503, times=2, method="PATCH")
    client.patch_card(message.message_id, DONE)
    assert clock.sleeps == [0.5, 1.0]
    assert [r.status for r in fake_feishu.calls("PATCH")] == [503, 503, 200]


def test_retries_are_bounded_and_the_error_says_when_to_try_again(fake_feishu, client, clock):
    message = _sent(client)
    fake_feishu.fail(status=500, times=10, method="PATCH")
    with pytest.raises(FeishuError) as excinfo:
        client.patch_card(message.message_id, DONE)
    assert excinfo.value.retryable and excinfo.value.http_status == 500
    assert len(fake_feishu.calls("PATCH")) == client.max_attempts == 4
    assert clock.sleeps == [0.5, 1.0, 2.0] and excinfo.value.retry_after == 4.0


def test_reset_beyond_the_retry_budget_is_handed_back_to_the_caller(fake_feishu, client, clock):
    message = _sent(client)
    fake_feishu.fail(status=429, headers={"x-ogw-ratelimit-reset": "60"}, method="PATCH")
    with pytest.raises(FeishuError) as excinfo:
        client.patch_card(message.message_id, DONE)
    assert excinfo.value.retryable and excinfo.value.retry_after == 60.0
    assert clock.sleeps == [] and len(fake_feishu.calls("PATCH")) == 1


def test_request_timeout_is_enforced_and_retryable(fake_feishu, clock):
    client = FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url,
                          timeout=0.2, max_attempts=1, sleep=clock.sleep, clock=clock.now)
    client.tenant_token()
    fake_feishu.fail(delay=1.0, method="PATCH")
    started = time.monotonic()
    with pytest.raises(FeishuError, match="Timeout") as excinfo:
        client.patch_card("om_unknown", DONE)
    assert time.monotonic() - started < 0.9
    assert excinfo.value.retryable


def test_unreachable_server_is_retried_a_bounded_number_of_times(clock):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connections are refused
    client = FeishuClient("cli_x", "s", f"http://127.0.0.1:{port}", timeout=1.0, sleep=clock.sleep, clock=clock.now)
    with pytest.raises(FeishuError, match="ConnectionError") as excinfo:
        client.tenant_token()
    assert excinfo.value.retryable and clock.sleeps == [0.5, 1.0, 2.0]


def test_total_retry_time_is_bounded(fake_feishu, clock):
    client = FeishuClient(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url,
                          max_attempts=10, max_retry_seconds=5.0, sleep=clock.sleep, clock=clock.now)
    message = _sent(client)
    fake_feishu.fail(status=502, times=20, method="PATCH")
    with pytest.raises(FeishuError):
        client.patch_card(message.message_id, DONE)
    assert sum(clock.sleeps) <= 5.0 and clock.sleeps == [0.5, 1.0, 2.0]


# --- logging -------------------------------------------------------------------------------------


def test_logs_never_contain_secrets_tokens_or_card_text(fake_feishu, client, caplog):
    caplog.set_level(logging.DEBUG)
    message = _sent(client)
    fake_feishu.fail(status=429, headers={"x-ogw-ratelimit-reset": "1"}, method="PATCH")
    fake_feishu.expire_tokens()
    client.patch_card(message.message_id, CARD)
    fake_feishu.fail(code=230099, msg="card build failed", method="PATCH")
    with pytest.raises(FeishuError):
        client.patch_card(message.message_id, CARD)
    tokens = {r.headers["authorization"].split()[1] for r in fake_feishu.calls(path=MESSAGES_PATH)}
    assert "retry" in caplog.text  # the retry was logged ...
    for secret in (fake_feishu.app_secret, "Secret plan", *tokens):
        assert secret not in caplog.text  # ... without anything secret


# --- HTTP session ----------------------------------------------------------------------------------


def test_proxy_from_the_environment_is_used_unless_the_host_is_exempt(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    through = FeishuClient("cli_x", "secret", FEISHU_BASE_URL)
    assert through._session.proxies.get("https") == "http://proxy.internal:3128"
    monkeypatch.setenv("NO_PROXY", "open.feishu.cn")
    direct = FeishuClient("cli_x", "secret", FEISHU_BASE_URL)
    assert "https" not in direct._session.proxies
    # Read once, when the client is made: a request does not consult the environment again.
    assert not through._session.trust_env and not direct._session.trust_env


def test_ca_bundle_from_the_environment_is_used(monkeypatch, tmp_path):
    bundle = tmp_path / "corporate-ca.pem"
    bundle.write_text("not used by this test\n")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    assert FeishuClient("cli_x", "secret", FEISHU_BASE_URL)._session.verify == str(bundle)
