from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from .integration import API_SECRET, make_bot

pytestmark = pytest.mark.django_db

URL = "https://askcards.example.com/callbacks/dingtalk/ding-fake-app/"


def run(*args: str) -> str:
    out = StringIO()
    call_command("askcards_dingtalk_register", *args, stdout=out)
    return out.getvalue()


def test_register_binds_the_route_with_the_api_secret(fake):
    make_bot(fake, callback_mode="http")
    output = run("--client-id", fake.client_id, "--url", URL)
    assert fake.routes["askcards-ding-fake-app"] == {"callbackUrl": URL, "apiSecret": API_SECRET}
    assert "askcards-ding-fake-app" in output and API_SECRET not in output


def test_register_keeps_an_existing_route_without_force(fake):
    make_bot(fake, callback_mode="http")
    run("--client-id", fake.client_id, "--url", URL)
    output = run("--client-id", fake.client_id, "--url", URL.replace("askcards.", "other."))
    assert fake.routes["askcards-ding-fake-app"]["callbackUrl"] == URL
    assert "--force" in output


def test_register_with_force_overwrites(fake):
    make_bot(fake, callback_mode="http")
    run("--client-id", fake.client_id, "--url", URL)
    run("--client-id", fake.client_id, "--url", URL.replace("askcards.", "other."), "--force")
    assert fake.routes["askcards-ding-fake-app"]["callbackUrl"].startswith("https://other.")


def test_register_refuses_an_unknown_bot(fake):
    with pytest.raises(CommandError, match="no DingTalk bot"):
        run("--client-id", "nope", "--url", URL)
