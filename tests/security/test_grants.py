"""Who may be asked (issue 10, point 6): an agent addresses only the web users an operator granted
it; otherwise 403 ``web_user_not_granted``, the same answer whether or not the user exists."""
from __future__ import annotations

import io
import json

import pytest
from django.contrib.admin.utils import quote
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient

from askcards import services
from askcards.models import Agent, Ask, Session
from tests.api.conftest import db_state, error_of, send
from tests.conftest import QUESTIONS, answer_for, person

pytestmark = pytest.mark.django_db

ALICE_SESSION = {"key": "web/alice", "platform": "web", "web_user": "alice"}


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def alice():
    return person("alice")


@pytest.fixture
def newcomer(alice) -> tuple[Agent, APIClient]:
    """An agent nobody granted anything, while a user alice exists."""
    agent, key = services.agent_create(name="newcomer")
    return agent, client_for(key)


def open_session(client: APIClient, body=ALICE_SESSION):
    return send(client, "POST", "/api/v1/sessions", body)


def call_tool(client: APIClient, session_id: str):
    body = {"session": session_id, "name": "ask_user_questions", "arguments": {"questions": QUESTIONS}}
    return send(client, "POST", "/api/v1/tools/call", body)


def admin_url(model: str, view: str, *args) -> str:
    return reverse(f"admin:askcards_{model}_{view}", args=[quote(arg) for arg in args])


# --------------------------------------------------------------------------------------- the API


def test_ungranted_agent_is_refused_web_user_and_nothing_is_created(newcomer):
    _, client = newcomer
    before = db_state()
    code, message = error_of(open_session(client), 403)
    assert code == "web_user_not_granted"
    assert "askcards_agent grant newcomer alice" in message
    assert db_state() == before


def test_unknown_username_gets_the_same_answer_as_an_ungranted_one(newcomer):
    _, client = newcomer
    known = open_session(client)
    unknown = open_session(client, dict(ALICE_SESSION, web_user="zed"))
    assert (known.status_code, unknown.status_code) == (403, 403)
    assert json.loads(unknown.content) == json.loads(known.content.decode().replace("alice", "zed"))


def test_existing_session_cannot_be_repointed_to_an_ungranted_user(agent, api, web_session):
    person("carol")
    code, _ = error_of(open_session(api, dict(ALICE_SESSION, web_user="carol")), 403)
    web_session.refresh_from_db()
    assert (code, web_session.web_user) == ("web_user_not_granted", "alice")


def test_session_without_web_user_needs_no_grant(newcomer):
    _, client = newcomer
    assert open_session(client, {"key": "web/nobody", "platform": "web"}).status_code == 201


# ---------------------------------------------------------------------------------- the command


def test_grant_command_lets_the_agent_ask_the_user(newcomer):
    _, client = newcomer
    assert "may now ask web user 'alice'" in run("askcards_agent", "grant", "newcomer", "alice")
    assert open_session(client).status_code == 201


def test_grant_command_is_idempotent(newcomer):
    run("askcards_agent", "grant", "newcomer", "alice")
    assert "already granted" in run("askcards_agent", "grant", "newcomer", "alice")
    assert list(newcomer[0].web_users.values_list("username", flat=True)) == ["alice"]


def test_revoke_refuses_the_next_tool_call_on_an_existing_session(newcomer, recording_surface):
    agent, client = newcomer
    run("askcards_agent", "grant", "newcomer", "alice")
    session_id = json.loads(open_session(client).content)["id"]
    recording_surface.present.add(session_id)
    assert call_tool(client, session_id).status_code == 200
    run("askcards_agent", "revoke", "newcomer", "alice")
    code, message = error_of(call_tool(client, session_id), 403)
    assert code == "web_user_not_granted" and "askcards_agent grant newcomer alice" in message
    assert Ask.objects.filter(agent=agent).count() == 1


def test_revoke_leaves_an_ask_already_pending_answerable(newcomer, recording_surface):
    agent, client = newcomer
    run("askcards_agent", "grant", "newcomer", "alice")
    session_id = json.loads(open_session(client).content)["id"]
    recording_surface.present.add(session_id)
    ask_id = json.loads(call_tool(client, session_id).content)["ask"]["id"]
    run("askcards_agent", "revoke", "newcomer", "alice")
    assert services.ask_answer(ask_id=ask_id, answers=answer_for(), surface="web").accepted


def test_revoke_command_of_no_grant_says_nothing_changed(newcomer):
    assert "was not granted web user 'alice'; nothing changed" in run("askcards_agent", "revoke", "newcomer", "alice")


def test_create_with_grant_prints_a_key_that_may_ask_the_user(alice):
    payload = json.loads(run("askcards_agent", "create", "my-agent", "--grant", "alice", "--json"))
    assert set(payload) == {"name", "key", "webhook_secret", "mcp_url"}
    assert open_session(client_for(payload["key"])).status_code == 201


def test_create_with_an_unknown_user_fails_clearly_and_creates_no_agent(alice):
    with pytest.raises(CommandError, match="no Django user named 'zed'"):
        run("askcards_agent", "create", "my-agent", "--grant", "alice", "--grant", "zed")
    assert not Agent.objects.filter(name="my-agent").exists()


def test_grant_to_an_unknown_agent_fails_clearly(alice):
    with pytest.raises(CommandError, match="no agent named 'ghost'"):
        run("askcards_agent", "grant", "ghost", "alice")


def test_grant_of_an_unknown_user_fails_clearly(newcomer):
    with pytest.raises(CommandError, match="no Django user named 'zed'"):
        run("askcards_agent", "grant", "newcomer", "zed")


def test_list_shows_each_agents_grants(newcomer):
    person("bob")
    run("askcards_agent", "grant", "newcomer", "bob")
    run("askcards_agent", "grant", "newcomer", "alice")
    line = next(line for line in run("askcards_agent", "list").splitlines() if line.startswith("newcomer\t"))
    assert line.endswith("\talice,bob\t-")  # web users, then bots (none)


# ------------------------------------------------------------------------------------ the admin


def post_agent(admin_client, agent: Agent, *users):
    return admin_client.post(
        admin_url("agent", "change", agent.pk),
        {"name": agent.name, "webhook_url": "", "is_active": "on", "web_users": [user.pk for user in users]},
    )


def test_admin_grant_on_the_agent_page_lets_the_agent_ask(admin_client, newcomer, alice):
    agent, client = newcomer
    assert post_agent(admin_client, agent, alice).status_code == 302
    assert open_session(client).status_code == 201


def test_admin_revoke_on_the_agent_page_takes_effect(admin_client, newcomer, alice, recording_surface):
    agent, client = newcomer
    services.agent_grant(agent=agent, username="alice", actor="test")
    session_id = json.loads(open_session(client).content)["id"]
    recording_surface.present.add(session_id)
    assert post_agent(admin_client, agent).status_code == 302
    assert error_of(call_tool(client, session_id), 403)[0] == "web_user_not_granted"


def test_admin_add_agent_with_a_grant(admin_client, alice):
    admin_client.post(admin_url("agent", "add"), {"name": "added", "webhook_url": "", "web_users": [alice.pk]})
    assert list(Agent.objects.get(name="added").web_users.all()) == [alice]


def test_admin_cannot_repoint_a_session_to_an_ungranted_user(admin_client, web_session):
    person("carol")
    response = admin_client.post(
        admin_url("session", "change", web_session.pk),
        {"web_user": "carol", "progress_cards-TOTAL_FORMS": "0", "progress_cards-INITIAL_FORMS": "0"},
    )
    assert response.status_code == 200 and "is not granted a web user" in response.content.decode()
    assert Session.objects.get(pk=web_session.pk).web_user == "alice"
