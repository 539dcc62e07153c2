"""askcards_walkthrough: the README's walkthrough set up by one command, non-interactive, and safe to
run again (the same working password and key, nothing changed)."""
from __future__ import annotations

import io
import shlex
import stat

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from askcards.models import Agent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def walkthrough(*args: str) -> dict[str, str]:
    """What ``eval "$(manage.py askcards_walkthrough)"`` sets in the shell."""
    out = io.StringIO()
    call_command("askcards_walkthrough", *args, stdout=out, stderr=io.StringIO())
    return dict(word.split("=", 1) for word in shlex.split(out.getvalue()))


def works(key: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get("/api/v1/asks").status_code == 200


def test_one_run_makes_a_user_who_signs_in_and_an_agent_granted_to_ask_her(client):
    shell = walkthrough()
    assert set(shell) == {"PASSWORD", "KEY"}
    signed_in = client.post("/login/", {"username": "alice", "password": shell["PASSWORD"]})
    assert signed_in.status_code == 302, "alice could not sign in with the printed password"
    assert client.get("/panel/").status_code == 200
    agent = Agent.objects.get(name="my-agent")
    assert [user.username for user in agent.web_users.all()] == ["alice"]
    assert works(shell["KEY"])


def test_a_second_run_changes_nothing_and_prints_the_same_working_key(data_dir):
    first = walkthrough()
    saved = (data_dir / "walkthrough.env").read_text()
    agent = Agent.objects.get(name="my-agent")
    assert walkthrough() == first
    assert (data_dir / "walkthrough.env").read_text() == saved
    assert Agent.objects.get(name="my-agent").key_hash == agent.key_hash
    assert [user.username for user in agent.web_users.all()] == ["alice"]
    assert get_user_model().objects.filter(username="alice").count() == 1
    assert works(first["KEY"])


def test_what_it_keeps_is_readable_by_its_owner_only(data_dir):
    walkthrough()
    mode = stat.S_IMODE((data_dir / "walkthrough.env").stat().st_mode)
    assert mode == 0o600


def test_a_key_rotated_since_is_replaced_by_a_new_working_one():
    first = walkthrough()
    call_command("askcards_agent", "rotate", "my-agent", "--key-only", stdout=io.StringIO())
    assert not works(first["KEY"])
    second = walkthrough()
    assert second["PASSWORD"] == first["PASSWORD"]
    assert second["KEY"] != first["KEY"] and works(second["KEY"])
    assert walkthrough() == second


def test_an_existing_user_with_a_password_of_their_own_is_refused_and_left_alone():
    get_user_model().objects.create_user(username="alice", password="hers")
    with pytest.raises(CommandError, match="--user"):
        walkthrough()
    assert get_user_model().objects.get(username="alice").check_password("hers")
    assert not Agent.objects.filter(name="my-agent").exists()


def test_another_user_and_agent_name():
    shell = walkthrough("--user", "bob", "--agent", "bobs-agent")
    agent = Agent.objects.get(name="bobs-agent")
    assert [user.username for user in agent.web_users.all()] == ["bob"]
    assert works(shell["KEY"])


def test_another_user_and_agent_keep_their_own_and_leave_the_first_pair_working():
    first = walkthrough()
    other = walkthrough("--user", "bob", "--agent", "bobs-agent")
    assert walkthrough() == first, "alice's password and my-agent's key, unchanged"
    assert walkthrough("--user", "bob", "--agent", "bobs-agent") == other
    assert works(first["KEY"]) and works(other["KEY"])
