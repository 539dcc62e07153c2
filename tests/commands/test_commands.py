"""askcards_agent and askcards_bot (SPEC §8): keys printed once, secrets never echoed, stored encrypted."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from askcards.models import Bot

pytestmark = pytest.mark.django_db

APP_SECRET = "feishu-app-secret-PLAINTEXT"
ENCRYPT_KEY = "feishu-encrypt-key-PLAINTEXT"
CLIENT_SECRET = "dingtalk-client-secret-PLAINTEXT"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def run_json(*args: str):
    return json.loads(run(*args))


def add_feishu(*extra: str) -> str:
    return run(
        "askcards_bot", "add", "feishu", "--app-id", "cli_a1", "--app-secret", APP_SECRET,
        "--encrypt-key", ENCRYPT_KEY, "--json", *extra,
    )  # fmt: skip


def add_dingtalk(*extra: str) -> str:
    return run(
        "askcards_bot", "add", "dingtalk", "--client-id", "ding_robot", "--client-secret", CLIENT_SECRET,
        "--callback", "stream", "--json", *extra,
    )  # fmt: skip


def raw_column(column: str, app_id: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {Bot._meta.db_table} WHERE app_id = %s", [app_id])
        return cursor.fetchone()[0]


# ----------------------------------------------------------------------------------------- agents


def test_agent_create_json_prints_name_key_secret_and_mcp_url():
    payload = run_json("askcards_agent", "create", "runner", "--json")
    assert set(payload) == {"name", "key", "webhook_secret", "mcp_url"}
    assert (payload["name"], payload["webhook_secret"]) == ("runner", None)
    assert payload["mcp_url"] == "http://127.0.0.1:8000/mcp?session={session}"


def test_agent_create_mcp_url_follows_the_public_url(settings):
    settings.ASKCARDS_PUBLIC_URL = "https://askcards.example.com"
    assert run_json("askcards_agent", "create", "runner", "--json")["mcp_url"] == "https://askcards.example.com/mcp?session={session}"


def test_agent_create_key_authenticates_against_the_api():
    key = run_json("askcards_agent", "create", "runner", "--json")["key"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/asks").status_code == 200


def test_agent_create_with_webhook_url_prints_signing_secret():
    payload = run_json("askcards_agent", "create", "runner", "--webhook-url", "https://agent.example/hook", "--json")
    assert payload["webhook_secret"].startswith("whsec_")


def test_agent_create_duplicate_name_fails_clearly():
    run("askcards_agent", "create", "runner")
    with pytest.raises(CommandError, match="an agent named 'runner' already exists"):
        run("askcards_agent", "create", "runner")


def test_agent_create_again_says_how_to_get_a_new_key_and_changes_nothing():
    first = run("askcards_agent", "create", "runner", "--key-only").strip()
    with pytest.raises(CommandError, match=r"key was shown once.*askcards_agent rotate runner --key-only"):
        run("askcards_agent", "create", "runner", "--key-only")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {first}")
    assert client.get("/api/v1/asks").status_code == 200  # the first key still works


def test_key_only_prints_just_a_working_key():
    key = run("askcards_agent", "create", "runner", "--key-only").strip()
    rotated = run("askcards_agent", "rotate", "runner", "--key-only").strip()
    assert key.startswith("ak_") and rotated.startswith("ak_") and "\n" not in rotated and rotated != key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {rotated}")
    assert client.get("/api/v1/asks").status_code == 200


def test_agent_rotate_invalidates_the_old_key():
    old = run_json("askcards_agent", "create", "runner", "--json")["key"]
    new = run_json("askcards_agent", "rotate", "runner", "--json")["key"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {old}")
    assert new != old
    assert client.get("/api/v1/asks").status_code == 401


# ------------------------------------------------------------------------------------------- bots


def test_bot_add_feishu_json_never_echoes_secrets():
    output = add_feishu()
    assert APP_SECRET not in output
    assert ENCRYPT_KEY not in output


def test_bot_add_feishu_defaults_to_feishu_base_url():
    assert json.loads(add_feishu())["base_url"] == "https://open.feishu.cn"


def test_bot_add_feishu_reports_which_secrets_are_set():
    assert json.loads(add_feishu())["secrets"] == {
        "app_secret": True,
        "verification_token": False,
        "encrypt_key": True,
        "api_secret": False,
    }


def test_bot_add_feishu_keeps_lark_base_url():
    lark = "https://open.larksuite.com"
    assert json.loads(add_feishu("--base-url", lark))["base_url"] == lark


def test_bot_add_dingtalk_stream_bot():
    payload = json.loads(add_dingtalk())
    assert (payload["platform"], payload["app_id"], payload["callback_mode"], payload["base_url"]) == (
        "dingtalk",
        "ding_robot",
        "stream",
        "https://api.dingtalk.com",
    )


def test_bot_add_dingtalk_json_never_echoes_secret():
    assert CLIENT_SECRET not in add_dingtalk()


def test_bot_add_duplicate_fails_clearly():
    add_feishu()
    with pytest.raises(CommandError, match="a feishu bot with id 'cli_a1' already exists"):
        add_feishu()


def test_bot_list_json_lists_bots_without_secrets():
    add_feishu()
    add_dingtalk()
    output = run("askcards_bot", "list", "--json")
    assert [(bot["platform"], bot["app_id"]) for bot in json.loads(output)] == [
        ("dingtalk", "ding_robot"),
        ("feishu", "cli_a1"),
    ]
    assert "PLAINTEXT" not in output


def test_bot_secrets_are_stored_encrypted():
    add_feishu()
    stored = raw_column("app_secret", "cli_a1") + raw_column("encrypt_key", "cli_a1")
    assert APP_SECRET not in stored
    assert ENCRYPT_KEY not in stored


def test_bot_secrets_decrypt_through_the_model():
    add_feishu()
    bot = Bot.objects.get(app_id="cli_a1")
    assert (bot.app_secret, bot.encrypt_key) == (APP_SECRET, ENCRYPT_KEY)


def test_bot_secrets_saved_under_another_secret_key_fail_clearly(settings):
    add_feishu()
    assert Bot.objects.get(app_id="cli_a1").app_secret == APP_SECRET  # decrypted once, remembered per key
    saved_with = settings.SECRET_KEY
    settings.SECRET_KEY = "a-different-askcards-secret-key"
    with pytest.raises(ValueError, match="ASKCARDS_SECRET_KEY differs"):
        Bot.objects.get(app_id="cli_a1")
    settings.SECRET_KEY = saved_with
    assert Bot.objects.get(app_id="cli_a1").app_secret == APP_SECRET


def test_port_sets_serves_default_address_and_the_printed_mcp_url(settings):
    from askcards.management.commands.serve import Command as Serve

    settings.ASKCARDS_PORT = "8123"  # what PORT=8123 in the environment gives
    parsed = Serve().create_parser("manage.py", "serve").parse_args([])
    assert parsed.addrport == "127.0.0.1:8123"
    assert run_json("askcards_agent", "create", "runner", "--json")["mcp_url"] == "http://127.0.0.1:8123/mcp?session={session}"
