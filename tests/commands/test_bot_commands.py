"""askcards_bot update, remove and test (SPEC §8), and the warning for a DingTalk HTTP bot that
cannot verify its callbacks. ``test`` talks to real HTTP servers on 127.0.0.1 standing in for
Feishu and DingTalk (tests/fakes), pointed to by the bot's base URL."""
from __future__ import annotations

import io
import json
import socket

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command

from askcards.runtime import checks
from askcards import services
from askcards.models import Bot
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.feishu import TOKEN_PATH as FEISHU_TOKEN_PATH
from tests.fakes.feishu import FakeFeishu
from tests.conftest import grant_bot

pytestmark = pytest.mark.django_db

NEW_SECRET = "rotated-app-secret-PLAINTEXT"


@pytest.fixture(autouse=True)
def private_cache(settings):
    """Tokens live in the Django cache: an empty in-process one per test (never a shared Redis)."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "askcards-bot-command-tests"}}
    cache.clear()
    yield
    cache.clear()


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("askcards_bot", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def feishu():
    with FakeFeishu() as fake:
        yield fake


@pytest.fixture
def dingtalk():
    with FakeDingTalk() as fake:
        yield fake


@pytest.fixture
def feishu_bot(feishu) -> Bot:
    return services.bot_add(platform="feishu", app_id=feishu.app_id, app_secret=feishu.app_secret,
                            base_url=feishu.base_url, encrypt_key="ek-PLAINTEXT")


@pytest.fixture
def dingtalk_bot(dingtalk) -> Bot:
    return services.bot_add(platform="dingtalk", app_id=dingtalk.client_id, app_secret=dingtalk.client_secret,
                            base_url=dingtalk.base_url, api_secret="api-PLAINTEXT", callback_mode="http")


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------------------------------ test


def test_test_feishu_bot_with_good_credentials_says_ok(feishu, feishu_bot):
    out, _ = run("test", "feishu", feishu.app_id)
    assert out.startswith("OK:") and feishu.base_url in out
    assert len(feishu.token_requests) == 1


def test_test_asks_the_platform_even_with_a_cached_token(feishu, feishu_bot):
    run("test", "feishu", feishu.app_id)
    run("test", "feishu", feishu.app_id)
    assert len(feishu.token_requests) == 2  # a cached token would hide a secret changed since


def test_test_feishu_bot_with_a_wrong_secret_fails_and_names_the_credentials(feishu, feishu_bot):
    services.bot_update(bot=feishu_bot, app_secret="not-the-secret")
    with pytest.raises(CommandError) as excinfo:
        run("test", "feishu", feishu.app_id)
    message = str(excinfo.value)
    assert message.startswith("FAILED (credentials)")
    assert "refused the app id or secret" in message and "10015" in message
    assert "not-the-secret" not in message


def test_test_dingtalk_bot_with_a_wrong_secret_fails_and_names_the_credentials(dingtalk, dingtalk_bot):
    services.bot_update(bot=dingtalk_bot, app_secret="not-the-secret")
    with pytest.raises(CommandError, match=r"FAILED \(credentials\).*invalidClientIdOrSecret"):
        run("test", "dingtalk", dingtalk.client_id)


def test_test_dingtalk_bot_with_good_credentials_says_ok(dingtalk, dingtalk_bot):
    out, err = run("test", "dingtalk", dingtalk.client_id)
    assert out.startswith("OK:") and err == ""
    assert len(dingtalk.requests_to("/v1.0/oauth2/accessToken")) == 1


def test_test_unreachable_platform_is_a_network_failure(feishu_bot):
    services.bot_update(bot=feishu_bot, base_url=closed_port_url())
    with pytest.raises(CommandError) as excinfo:
        run("test", "feishu", feishu_bot.app_id, "--timeout", "2")
    assert str(excinfo.value).startswith("FAILED (network): could not reach http://127.0.0.1:")


def test_test_platform_error_status_is_reported_with_its_http_status(feishu, feishu_bot):
    feishu.fail(times=5, status=503, path=FEISHU_TOKEN_PATH)
    with pytest.raises(CommandError, match=r"FAILED \(http\): .* answered HTTP 503"):
        run("test", "feishu", feishu.app_id)


def test_test_json_reports_cause_and_status(dingtalk, dingtalk_bot):
    dingtalk.fail("/v1.0/oauth2/accessToken", status=400, code="invalidClientIdOrSecret", message="无效的clientId或者clientSecret")
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("askcards_bot", "test", "dingtalk", dingtalk.client_id, "--json", stdout=out)
    payload = json.loads(out.getvalue())
    assert (payload["ok"], payload["cause"], payload["http_status"]) == (False, "credentials", 400)


def test_test_unknown_bot_fails_clearly(db):
    with pytest.raises(CommandError, match="no feishu bot with id 'cli_nope'"):
        run("test", "feishu", "cli_nope")


# ---------------------------------------------------------------------------------------- update


def test_update_replaces_a_secret_and_never_prints_it(feishu_bot):
    out, err = run("update", "feishu", feishu_bot.app_id, "--app-secret", NEW_SECRET)
    assert out.strip() == f"Updated feishu bot {feishu_bot.app_id}: app_secret."
    assert NEW_SECRET not in out + err
    assert Bot.objects.get(pk=feishu_bot.pk).app_secret == NEW_SECRET


def test_update_keeps_what_is_not_given(feishu_bot):
    run("update", "feishu", feishu_bot.app_id, "--name", "Ops bot")
    bot = Bot.objects.get(pk=feishu_bot.pk)
    assert (bot.name, bot.encrypt_key, bot.base_url) == ("Ops bot", "ek-PLAINTEXT", feishu_bot.base_url)


def test_update_clear_removes_a_stored_secret(feishu_bot):
    out, _ = run("update", "feishu", feishu_bot.app_id, "--clear", "encrypt_key", "--json")
    assert json.loads(out)["secrets"]["encrypt_key"] is False
    assert Bot.objects.get(pk=feishu_bot.pk).encrypt_key == ""


def test_update_inactive_then_active(feishu_bot):
    run("update", "feishu", feishu_bot.app_id, "--inactive")
    assert Bot.objects.get(pk=feishu_bot.pk).is_active is False
    run("update", "feishu", feishu_bot.app_id, "--active")
    assert Bot.objects.get(pk=feishu_bot.pk).is_active is True


def test_update_with_nothing_new_says_nothing_changed(feishu_bot):
    out, _ = run("update", "feishu", feishu_bot.app_id, "--base-url", feishu_bot.base_url)
    assert "nothing changed" in out


def test_update_with_a_bad_base_url_changes_nothing(feishu_bot):
    with pytest.raises(CommandError, match="base_url"):
        run("update", "feishu", feishu_bot.app_id, "--base-url", "not a url", "--name", "renamed")
    bot = Bot.objects.get(pk=feishu_bot.pk)
    assert (bot.base_url, bot.name) == (feishu_bot.base_url, "")


def test_update_cannot_blank_the_app_secret(feishu_bot):
    with pytest.raises(CommandError, match="app secret cannot be cleared"):
        run("update", "feishu", feishu_bot.app_id, "--app-secret", "  ")
    assert Bot.objects.get(pk=feishu_bot.pk).app_secret == feishu_bot.app_secret


def test_update_service_refuses_a_field_the_platform_does_not_use(feishu_bot):
    with pytest.raises(services.agents.InvalidInput, match="a feishu bot has no api_secret"):
        services.bot_update(bot=feishu_bot, api_secret="x")
    assert Bot.objects.get(pk=feishu_bot.pk).api_secret == ""


def test_add_service_refuses_an_option_the_platform_does_not_use(db):
    with pytest.raises(services.agents.InvalidInput, match="a feishu bot has no api_secret, template_id"):
        services.bot_add(platform="feishu", app_id="cli_unused", app_secret="s", api_secret="x", template_id="tpl")
    with pytest.raises(services.agents.InvalidInput, match="a dingtalk bot has no encrypt_key"):
        services.bot_add(platform="dingtalk", app_id="ding_unused", app_secret="s", encrypt_key="k")
    assert not Bot.objects.exists()
    # The field's default (what a form or command passes for a field left alone) is no option given.
    bot = services.bot_add(platform="feishu", app_id="cli_plain", app_secret="s", api_secret="", template_id="",
                           callback_mode=Bot.CallbackMode.HTTP)
    assert (bot.api_secret, bot.template_id) == ("", "")


def test_update_unknown_bot_fails_clearly(db):
    with pytest.raises(CommandError, match="no dingtalk bot with id 'ding_nope'"):
        run("update", "dingtalk", "ding_nope", "--name", "x")


# ---------------------------------------------------------------------------------------- remove


def test_remove_deletes_an_unused_bot(feishu_bot):
    out, _ = run("remove", "feishu", feishu_bot.app_id)
    assert out.strip() == f"Removed feishu bot {feishu_bot.app_id}."
    assert not Bot.objects.filter(pk=feishu_bot.pk).exists()


def test_remove_retires_a_bot_sessions_refer_to(agent, feishu_bot):
    grant_bot(agent, feishu_bot)
    services.session_upsert(agent=agent, key=f"feishu-{feishu_bot.app_id}-private-ou_alice", bot=feishu_bot)
    out, _ = run("remove", "feishu", feishu_bot.app_id, "--json")
    payload = json.loads(out)
    assert (payload["removed"], payload["retired"], payload["sessions"]) == (False, True, 1)
    assert Bot.objects.get(pk=feishu_bot.pk).is_active is False


def test_retired_bot_refuses_its_callbacks(agent, feishu_bot, client):
    grant_bot(agent, feishu_bot)
    services.session_upsert(agent=agent, key=f"feishu-{feishu_bot.app_id}-private-ou_alice", bot=feishu_bot)
    run("remove", "feishu", feishu_bot.app_id)
    response = client.post(f"/callbacks/feishu/{feishu_bot.app_id}/", data=b"{}", content_type="application/json")
    assert response.status_code == 404


# ---------------------------------------------------------------- DingTalk HTTP bot without api secret


def test_add_dingtalk_http_bot_without_api_secret_warns():
    out, err = run("add", "dingtalk", "--client-id", "ding_http", "--client-secret", "s", "--callback", "http")
    assert out.startswith("Added dingtalk bot ding_http")
    assert "Warning: dingtalk bot ding_http takes HTTP callbacks but has no api secret" in err


def test_add_dingtalk_stream_bot_does_not_warn():
    _, err = run("add", "dingtalk", "--client-id", "ding_stream", "--client-secret", "s", "--callback", "stream")
    assert err == ""


def test_update_clearing_the_api_secret_warns_and_json_lists_it(dingtalk_bot):
    out, _ = run("update", "dingtalk", dingtalk_bot.app_id, "--clear", "api_secret", "--json")
    (warning,) = json.loads(out)["warnings"]
    assert "has no api secret" in warning


def test_system_check_names_active_http_bots_without_api_secret(db):
    services.bot_add(platform="dingtalk", app_id="ding_unsigned", app_secret="s", callback_mode="http")
    services.bot_add(platform="dingtalk", app_id="ding_signed", app_secret="s", callback_mode="http", api_secret="a")
    services.bot_add(platform="dingtalk", app_id="ding_stream", app_secret="s", callback_mode="stream")
    services.bot_add(platform="dingtalk", app_id="ding_off", app_secret="s", callback_mode="http", is_active=False)
    (warning,) = checks.askcards_dingtalk_http_bots(None, databases=["default"])
    assert warning.id == "askcards.W003"
    assert "ding_unsigned" in warning.msg
    assert not any(name in warning.msg for name in ("ding_signed", "ding_stream", "ding_off"))
    assert checks.askcards_dingtalk_http_bots(None, databases=None) == []


def test_system_check_is_quiet_when_every_http_bot_has_its_secret(dingtalk_bot):
    assert checks.askcards_dingtalk_http_bots(None, databases=["default"]) == []
