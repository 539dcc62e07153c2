"""One heartbeat for all of a process's panel sockets (``surfaces.web.panels_catch_up`` and
``consumers.PanelBeat``): each socket gets what it lacks, and the beat's statements do not grow
with the number of sockets."""
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from askcards import services
from askcards.models import Ask, PanelPresence
from askcards.surfaces import web
from tests.conftest import QUESTIONS, answer_for, grant, person

WEB = ["askcards.surfaces.web.WebSurface"]


def _session(agent, username):
    grant(agent, username)
    session, _ = services.session_upsert(agent=agent, key=f"web/{username}", platform="web", web_user=username,
                                         user_id=username)
    return session


def _ask(agent, session):
    web.presence_touch(username=session.web_user, channel_name=f"connect-{session.web_user}")
    outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                 arguments={"questions": QUESTIONS})
    assert outcome.status == "pending"
    return outcome.ask


def _shown(*ask_ids):
    view = web.PanelView()
    for ask_id in ask_ids:
        view.sent({"type": "ask_user_questions", "requestId": ask_id})
    return view


def _said(found):
    return [(m["type"], m.get("requestId") or m["ask"]["requestId"]) for m in found.messages]


def test_each_socket_gets_what_it_still_lacks_at_the_next_look(db, settings, agent):
    settings.ASKCARDS_SURFACES = WEB
    alice, bob, carol = (_session(agent, name) for name in ("alice", "bob", "carol"))
    a1, b1, c1 = _ask(agent, alice), _ask(agent, bob), _ask(agent, carol)
    services.ask_answer(ask_id=b1.id, answers=answer_for(), surface="feishu")  # no push reached bob's socket
    sockets = [
        web.PanelSocket("alice", "alice-1", _shown(a1.id)),  # up to date
        web.PanelSocket("alice", "alice-2", _shown()),  # its push was lost
        web.PanelSocket("bob", "bob-1", _shown(b1.id)),  # shows an ask that ended
        web.PanelSocket("carol", "carol-1", _shown(c1.id)),
        web.PanelSocket("dave", "dave-1", _shown()),  # a user with no session at all
    ]

    first = web.panels_catch_up(sockets)  # a push may still be under way: nothing is said yet
    assert [_said(f) for f in first] == [[]] * len(sockets)
    assert [f.suspects for f in first] == [set(), {a1.id}, {b1.id}, set(), set()]
    for socket, catch_up in zip(sockets, first):
        socket.view.caught_up(socket.view.copy(), catch_up)

    found = web.panels_catch_up(sockets, presence=False)

    assert [_said(f) for f in found] == [
        [],
        [("ask_user_questions", a1.id)],
        [("ask_user_questions_cancelled", b1.id), ("history_add", b1.id)],
        [],
        [],
    ]
    assert [f.pending for f in found] == [{a1.id}, {a1.id}, set(), {c1.id}, set()]
    assert found[2].messages[0]["reason"] == "submitted"
    present = dict(PanelPresence.objects.filter(channel_name__in=[s.channel_name for s in sockets])
                   .values_list("channel_name", "username"))
    assert present == {s.channel_name: s.username for s in sockets}


def test_a_beat_costs_the_same_statements_for_many_sockets_as_for_one(db, settings, agent):
    settings.ASKCARDS_SURFACES = WEB
    users = [f"user{i}" for i in range(40)]
    asks = {name: _ask(agent, _session(agent, name)).id for name in users}

    def statements(names, per_user):
        sockets = [web.PanelSocket(name, f"{name}-{n}", _shown(asks[name])) for name in names for n in range(per_user)]
        with CaptureQueriesContext(connection) as queries:
            found = web.panels_catch_up(sockets)
        assert all(not f.messages for f in found)  # nothing was missed
        return len(queries)

    assert statements(users[:1], 1) == statements(users, 3)


def test_a_beat_makes_again_the_presence_the_worker_purged(db):
    person("ann")
    web.presence_touch(username="ann", channel_name="stalled")
    PanelPresence.objects.filter(channel_name="stalled").update(last_seen=timezone.now() - timedelta(minutes=5))
    web.presence_purge_stale()
    assert not web.is_present("ann")

    web.panels_catch_up([web.PanelSocket("ann", "stalled", web.PanelView())])

    assert web.is_present("ann")
    assert PanelPresence.objects.filter(channel_name="stalled").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_one_beat_serves_every_socket_and_outlives_a_disconnect(settings, agent, monkeypatch):
    """Three sockets of two users on one process: the process's single heartbeat task catches up
    the ones still connected after one of them left."""
    from askcards.pages import consumers
    from tests.consumers.test_panel import _panel

    settings.ASKCARDS_SURFACES = WEB
    monkeypatch.setattr(web, "HEARTBEAT_SECONDS", 0.2)
    monkeypatch.setattr(web, "PUSH_GRACE_SECONDS", 0.05)
    alice, bob = await database_sync_to_async(lambda: (_session(agent, "alice"), _session(agent, "bob")))()
    sockets = [await _panel(await database_sync_to_async(person)(name)) for name in ("alice", "alice", "bob")]
    assert len(consumers.panel_beat.sockets) == 3
    monkeypatch.setattr(web.WebSurface, "_push", lambda self, ask, message: None)  # every push lost from now on
    await sockets[1].disconnect()
    a1 = await database_sync_to_async(_ask)(agent, alice)
    b1 = await database_sync_to_async(_ask)(agent, bob)

    for socket, ask in ((sockets[0], a1), (sockets[2], b1)):
        message = await socket.receive_json_from(timeout=5)
        assert (message["type"], message["requestId"]) == ("ask_user_questions", ask.id)
        assert await socket.receive_nothing(timeout=0.5)  # and not again at the next beats
    for socket in (sockets[0], sockets[2]):
        await socket.disconnect()
    assert consumers.panel_beat.sockets == {} and consumers.panel_beat.task is None


def test_a_full_page_is_told_how_many_more_wait_and_forgets_what_ended_beyond_it(db, settings, agent):
    settings.ASKCARDS_SURFACES = WEB
    alice = _session(agent, "alice")
    asks = [_ask(agent, alice).id for _ in range(web.page_size() + 3)]
    view = _shown(*asks[:web.page_size()])  # a full page; the pushes of the three others were lost
    socket = web.PanelSocket("alice", "alice-1", view)

    for _ in range(2):  # a difference is acted on at its second look
        found = web.panels_catch_up([socket], presence=False)[0]
        news = view.caught_up(view.copy(), found)
        for message in news:
            view.sent(message)  # as the socket sends it

    assert news == [{"type": "pending_more", "count": 3}]  # counted, not shown: the page is full
    assert view.more == set(asks[web.page_size():])

    # One of them ends with its push lost too: the next beat forgets it without reading any ask.
    services.ask_cancel(ask=Ask.objects.get(pk=asks[-1]), actor="agent:a")
    found = web.panels_catch_up([socket], presence=False)[0]
    assert view.caught_up(view.copy(), found) == [{"type": "pending_more", "count": 2}]
    assert view.room() == 0
