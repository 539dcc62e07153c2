"""The panel page and sign-in (SPEC §6.3): any Django user, not only staff, reaches /panel/."""
import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


def test_anonymous_visitor_is_sent_to_sign_in(client):
    response = client.get("/panel/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/panel/")
    assert client.get("/")["Location"] == "/panel/"


def test_plain_user_signs_in_and_gets_the_panel(client, alice):
    assert not alice.is_staff
    response = client.post("/login/", {"username": "alice", "password": "pw-alice-123", "next": "/panel/"})
    assert (response.status_code, response["Location"]) == (302, "/panel/")
    page = client.get("/panel/").content.decode()
    assert '<html lang="zh-CN">' in page and "待回答的问题" in page
    assert 'data-socket-path="/ws/panel/"' in page and "askcards/panel.js" in page
    assert ">alice<" in page  # who is signed in


def test_wrong_password_says_so_and_signs_nobody_in(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert "用户名或密码不正确。" in response.content.decode()
    assert client.get("/panel/").status_code == 302


def test_sign_out_ends_the_session(client, alice):
    client.force_login(alice)
    assert client.get("/panel/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/panel/").status_code == 302
