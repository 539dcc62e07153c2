"""Concurrent platform callbacks on the same asks from several processes on PostgreSQL (SPEC §5
rule 1, §6.1, §6.2, §8): the Feishu and DingTalk callback paths, as ``test_postgres_races`` does
for the web and API paths. Every process starts at one wall-clock instant; the database is checked
afterwards.

Feishu, per-ask race: five processes walk the same asks of one session in step. Two replay the
*same* signed, encrypted callback (one event_id: a platform re-delivery), two send their own event
with their own answer, one cancels through ``services.ask_cancel``.

Feishu, the card's cancel button: three processes submit every ask of another session (walking
from the last ask to the first) while a fourth presses the progress card's cancel button, which
cancels all of the session's open asks in one transaction.

DingTalk: a targeted collection of six respondents gets every response at once from three
processes (two respondents from two processes with different answers, one respondent's cancel
twice), while two more processes run the deadline sweep over a second collection whose deadline
has passed (two of its respondents answered in time, two more click late).
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.scale import harness

pytestmark = pytest.mark.postgres

FEISHU_APP = "cli_race"
ASKS = 10  # the per-ask race (the session of ou_x)
BUTTON_ASKS = 12  # the cancel-button race (the session of ou_y)
STALE = "问题已失效"
SUBMITTED = "已提交"
CANCELLED = "任务已取消"


def _no_failures(outputs) -> None:
    """No process raised (``act`` reports errors per ask, the others as a list), logged an error,
    or answered a callback with anything but HTTP 200."""
    failures = []
    for output in outputs:
        name = output.get("name") or output.get("role")
        errors = output.get("errors") or []
        failures += [(name, error) for error in (errors.items() if isinstance(errors, dict) else errors)]
        failures += [(name, message) for message in output["logged_errors"]]
        failures += [
            (name, reply.get("error") or reply["status"])
            for reply in output.get("replies", [])
            if "error" in reply or reply["status"] != 200
        ]
    assert failures == []


# ------------------------------------------------------------------------------------- Feishu


def _callback(operator: str, event_id: str, value: dict, **kwargs) -> dict:
    from tests.feishu.integration import signed_callback

    body, headers = signed_callback(FEISHU_APP, operator=operator, value=value, event_id=event_id, **kwargs)
    return {"body": body.decode(), "headers": headers, "event_id": event_id}


def _submit(session_id: str, operator: str, ask_id: str, label: str, event_id: str) -> dict:
    value = {"kind": "feishu_ask", "act": "submit", "sessionId": session_id, "requestId": ask_id, "sender": operator}
    entry = _callback(operator, event_id, value, form_value={"c0_0": label}, name="submit_0")
    return {**entry, "ask_id": ask_id, "label": label}


@pytest.fixture(scope="module")
def feishu_race(pg_db, tmp_path_factory):
    """One setup, both Feishu races run once; the tests below each check one outcome."""
    setup = harness.run_actor(
        pg_db, "feishu-setup", "--agent", "feishu-racer", "--app-id", FEISHU_APP,
        "--session", f"ou_x={ASKS}", "--session", f"ou_y={BUTTON_ASKS}",
    )
    x, y = setup["sessions"]["ou_x"], setup["sessions"]["ou_y"]
    callbacks = {
        # The same bytes for both re-delivering processes: one event, delivered twice.
        "redeliver": [_submit(x["session_id"], "ou_x", a, "redelivered", f"ev-dup-{a}") for a in x["ask_ids"]],
        "answer-c": [_submit(x["session_id"], "ou_x", a, "answer-c", f"ev-c-{a}") for a in x["ask_ids"]],
        "answer-d": [_submit(x["session_id"], "ou_x", a, "answer-d", f"ev-d-{a}") for a in x["ask_ids"]],
    }
    for n in (1, 2, 3):
        callbacks[f"button-{n}"] = [
            _submit(y["session_id"], "ou_y", a, f"button-{n}", f"ev-y{n}-{a}") for a in reversed(y["ask_ids"])
        ]
    cancel_value = {"kind": "feishu_progress", "act": "cancel", "sessionId": y["session_id"], "sender": "ou_y"}
    callbacks["cancel-button"] = [
        {**_callback("ou_y", "ev-cancel-button", cancel_value, name="cancel"), "ask_id": ""}
    ]
    path = tmp_path_factory.mktemp("feishu") / "callbacks.json"
    path.write_text(json.dumps(callbacks))

    def click(name: str, *options: str) -> list[str]:
        return ["feishu-click", "--app-id", FEISHU_APP, "--file", str(path), "--name", name, *options]

    per_ask = harness.run_actors_together(pg_db, [
        click("redeliver"), click("redeliver"), click("answer-c"), click("answer-d"),
        # A wider jitter for the cancel, whose path is shorter than a callback's: every ending wins some.
        ["act", "cancel", "--real-surfaces", "--jitter", "0.03", *x["ask_ids"]],
    ])
    button = harness.run_actors_together(pg_db, [
        *(click(f"button-{n}", "--slot", "0.01") for n in (1, 2, 3)),
        click("cancel-button", "--jitter", "0.02"),  # pressed while the submits are under way
    ])
    return setup, callbacks, per_ask, button


def _toasts(outputs, ask_ids) -> dict[str, list[tuple[str, str | None]]]:
    """Per ask: (process name, toast text or None for an empty body) of every callback reply."""
    toasts: dict[str, list[tuple[str, str | None]]] = {ask_id: [] for ask_id in ask_ids}
    for output in outputs:
        for reply in output.get("replies", []):
            if reply["ask_id"] in toasts:
                toast = reply["body"].get("toast")
                assert reply["body"] == {} or toast["type"] in ("success", "info"), reply
                toasts[reply["ask_id"]].append((output["name"], toast["content"] if toast else None))
    return toasts


def _per_ask(pg_db, sql: str, ask_ids) -> dict[str, int]:
    return dict(pg_db.query(sql + " AND ask_id = ANY(%s) GROUP BY ask_id", ask_ids))


def _endings(pg_db, ask_ids) -> dict[str, tuple]:
    rows = pg_db.query(
        "SELECT id, status, reason, result->'answers'->0->>'customInput' FROM askcards_ask WHERE id = ANY(%s)", ask_ids
    )
    return {ask_id: rest for ask_id, *rest in rows}


def test_feishu_racing_callbacks_raise_nothing(feishu_race):
    _, _, per_ask, button = feishu_race
    _no_failures(per_ask + button)
    print("feishu first-step lateness (s):", [o["replies"][0]["late"] for o in per_ask + button if "replies" in o])


def test_feishu_racing_callbacks_end_each_ask_once_with_the_winners_ending(feishu_race, pg_db):
    setup, _, per_ask, _ = feishu_race
    ask_ids = setup["sessions"]["ou_x"]["ask_ids"]
    cancel = per_ask[-1]
    toasts = _toasts(per_ask[:-1], ask_ids)
    endings = _endings(pg_db, ask_ids)
    wins = Counter()
    for ask_id in ask_ids:
        answered = [name for name, toast in toasts[ask_id] if toast == SUBMITTED]
        cancelled = [ask_id] if ask_id in cancel["won"] else []
        assert len(answered) + len(cancelled) == 1, (ask_id, toasts[ask_id], cancel)
        status, reason, answer = endings[ask_id]
        if cancelled:
            assert (status, reason, answer) == ("cancelled", "by_agent", None), ask_id
            wins["cancel"] += 1
        else:
            label = "redelivered" if answered[0] == "redeliver" else answered[0]
            assert (status, reason, answer) == ("answered", "submitted", label), ask_id
            wins[label] += 1
        # Everyone else was told the question is gone; one re-delivery copy got the empty body.
        losers = sorted(toast or "{}" for name, toast in toasts[ask_id] if toast != SUBMITTED)
        assert losers == sorted([STALE] * (3 - len(answered)) + ["{}"]), (ask_id, toasts[ask_id])
    print("feishu wins:", dict(wins))


def test_feishu_redelivered_event_is_handled_once(feishu_race, pg_db):
    setup, callbacks, per_ask, button = feishu_race
    ask_ids = setup["sessions"]["ou_x"]["ask_ids"]
    toasts = _toasts(per_ask[:2], ask_ids)
    for ask_id in ask_ids:
        # Exactly one of the two copies was handled (its toast), the other answered with {}.
        assert sorted(toast is None for _, toast in toasts[ask_id]) == [False, True], (ask_id, toasts[ask_id])
    receipts = pg_db.query("SELECT event_id, count(*) FROM askcards_callbackreceipt WHERE platform = 'feishu' GROUP BY 1")
    sent = {entry["event_id"] for entries in callbacks.values() for entry in entries}
    assert dict(receipts) == dict.fromkeys(sent, 1)


def test_feishu_racing_callbacks_write_one_closed_event_and_outbox_row_per_ask(feishu_race, pg_db):
    setup, _, _, _ = feishu_race
    ask_ids = setup["sessions"]["ou_x"]["ask_ids"] + setup["sessions"]["ou_y"]["ask_ids"]
    assert _per_ask(pg_db, "SELECT ask_id, count(*) FROM askcards_askevent WHERE kind = 'closed'", ask_ids) == (
        dict.fromkeys(ask_ids, 1)
    )
    assert _per_ask(pg_db, "SELECT ask_id, count(*) FROM askcards_outboxevent WHERE type = 'ask.closed'", ask_ids) == (
        dict.fromkeys(ask_ids, 1)
    )
    seqs = [seq for (seq,) in pg_db.query(
        "SELECT seq FROM askcards_outboxevent WHERE agent_id = %s ORDER BY seq", setup["agent_id"]
    )]
    assert seqs == list(range(1, len(seqs) + 1))


def test_feishu_racing_callbacks_audit_every_loser_as_ignored(feishu_race, pg_db):
    setup, _, _, _ = feishu_race
    ask_ids = setup["sessions"]["ou_x"]["ask_ids"]
    # Four attempts took effect per ask (one copy of the re-delivered event, two other events, the
    # cancel): one closed it, three left an "ignored" row; the refused re-delivery left none.
    ignored = _per_ask(pg_db, "SELECT ask_id, count(*) FROM askcards_askevent WHERE kind = 'ignored'", ask_ids)
    assert ignored == dict.fromkeys(ask_ids, 3)


def test_feishu_cancel_button_racing_submits_ends_each_ask_once(feishu_race, pg_db):
    setup, _, _, button = feishu_race
    ask_ids = setup["sessions"]["ou_y"]["ask_ids"]
    (pressed,) = button[-1]["replies"]
    assert pressed["body"]["toast"] == {"type": "success", "content": CANCELLED}
    toasts = _toasts(button[:-1], ask_ids)
    endings = _endings(pg_db, ask_ids)
    wins = Counter()
    for ask_id in ask_ids:
        answered = [name for name, toast in toasts[ask_id] if toast == SUBMITTED]
        status, reason, answer = endings[ask_id]
        if answered:
            assert len(answered) == 1 and (status, reason, answer) == ("answered", "submitted", answered[0]), ask_id
        else:
            assert (status, reason) == ("cancelled", "session_cancelled"), ask_id
        wins[answered[0] if answered else "cancel-button"] += 1
        assert sorted(toast for _, toast in toasts[ask_id]) == sorted([SUBMITTED] * len(answered) + [STALE] * (3 - len(answered)))
    # Each refused submit left its own "ignored" row (the surface names the click).
    ignored = _per_ask(
        pg_db, "SELECT ask_id, count(*) FROM askcards_askevent WHERE kind = 'ignored' AND surface = 'feishu'", ask_ids
    )
    assert ignored == {ask_id: 3 - sum(t == SUBMITTED for _, t in toasts[ask_id]) for ask_id in ask_ids}
    requested = pg_db.query(
        "SELECT count(*) FROM askcards_outboxevent WHERE type = 'session.cancel_requested' AND session_id = %s",
        setup["sessions"]["ou_y"]["session_id"],
    )
    assert requested == [(1,)]
    print("cancel-button race wins:", dict(wins))


# ----------------------------------------------------------------------------------- DingTalk

RESPONDENTS = [f"staff_{n}" for n in range(1, 7)]
EARLY = 2  # respondents of the due collection who answered before its deadline
A = {"dish": {"index": 0, "value": "a"}}
B = {"dish": {"index": 1, "value": "b"}}


@pytest.fixture(scope="module")
def dingtalk_race(pg_db):
    from tests.fakes.dingtalk import FakeDingTalk

    with FakeDingTalk() as fake:  # serves the setup's createAndDeliver; callbacks never call it
        setup = harness.run_actor(
            pg_db, "dingtalk-setup", "--agent", "dingtalk-racer", "--app-id", fake.client_id,
            "--app-secret", fake.client_secret, "--base-url", fake.base_url, "--respondents", *RESPONDENTS,
            "--early", str(EARLY),
        )
        live, due = setup["asks"]["live"], setup["asks"]["due"]
        # Step i of every process runs at the same instant: staff_2 and staff_4 answer from two
        # processes with different answers, staff_6 cancels from two, two late clicks on the due one.
        processes = [
            [(live, "staff_1", A), (live, "staff_3", A), (live, "staff_5", A)],
            [(live, "staff_2", A), (live, "staff_4", A), (live, "staff_6", "cancel")],
            [(live, "staff_2", B), (live, "staff_4", B), (live, "staff_6", "cancel")],
            [(due, "staff_5", A), (due, "staff_6", B)],
        ]
        commands = []
        for clicks in processes:
            encoded = [
                {"ask_id": ask_id, "user": user, **({"cancel": True} if form == "cancel" else {"form": form})}
                for ask_id, user, form in clicks
            ]
            commands.append(["dingtalk-click", "--app-id", setup["app_id"], "--api-secret", setup["api_secret"],
                             "--clicks", json.dumps(encoded)])
        outputs = harness.run_actors_together(pg_db, commands + [["sweep"], ["sweep"]])
    return setup, processes, outputs


def _notice(reply) -> str:
    return reply["body"]["userPrivateData"]["cardParamMap"]["user_notice"]


def test_dingtalk_racing_callbacks_and_sweeps_raise_nothing(dingtalk_race):
    _, _, outputs = dingtalk_race
    _no_failures(outputs)
    print("dingtalk first-step lateness (s):", [o["replies"][0]["late"] if "replies" in o else o["late"] for o in outputs])


def test_dingtalk_records_each_respondents_first_response_once(dingtalk_race, pg_db):
    from askcards.surfaces.dingtalk import cards

    setup, processes, outputs = dingtalk_race
    live = setup["asks"]["live"]
    rows = dict((r, (s, d)) for r, s, d in pg_db.query(
        "SELECT respondent_id, status, answers->'values'->>0 FROM askcards_respondent WHERE ask_id = %s", live
    ))
    replies: dict[str, list[tuple[object, str]]] = {}
    for clicks, output in zip(processes, outputs):
        for (ask_id, user, form), reply in zip(clicks, output["replies"]):
            if ask_id == live:
                replies.setdefault(user, []).append((form, _notice(reply)))
    for user in RESPONDENTS:
        status, value = rows[user]
        if user == "staff_6":  # the same cancel twice: recorded once, the repeat is a duplicate
            assert status == "cancelled" and [n for _, n in replies[user]] == ["", ""], replies[user]
            continue
        assert status == "submitted", user
        recorded = [form for form, notice in replies[user] if notice == ""]
        assert len(recorded) == 1 and value == recorded[0]["dish"]["value"], (user, value, replies[user])
        already = cards.NOTICES[cards.ClickRefusal.ALREADY]
        assert sorted(n for _, n in replies[user] if n) == [already] * (len(replies[user]) - 1)
    responded = pg_db.query(
        "SELECT count(*), count(DISTINCT actor) FROM askcards_askevent WHERE kind = 'responded' AND ask_id = %s", live
    )
    assert responded == [(len(RESPONDENTS), len(RESPONDENTS))]
    ignored = Counter(attempted for (attempted,) in pg_db.query(
        "SELECT detail->>'attempted' FROM askcards_askevent WHERE kind = 'ignored' AND ask_id = %s", live
    ))
    assert ignored == {"again/submitted": 2, "duplicate/cancelled": 1}


def _progress(pg_db, ask_id) -> list[tuple[int, int]]:
    return [(data["received"], data["total"]) for (data,) in pg_db.query(
        "SELECT data FROM askcards_outboxevent WHERE type = 'ask.progress' AND ask_id = %s ORDER BY seq", ask_id
    )]


def test_dingtalk_progress_events_count_each_response_once_in_order(dingtalk_race, pg_db):
    setup, _, _ = dingtalk_race
    total = len(RESPONDENTS)
    assert _progress(pg_db, setup["asks"]["live"]) == [(n, total) for n in range(1, total + 1)]
    assert _progress(pg_db, setup["asks"]["due"]) == [(n, total) for n in range(1, EARLY + 1)]


def test_dingtalk_collections_produce_their_result_once(dingtalk_race, pg_db):
    setup, _, outputs = dingtalk_race
    asks = setup["asks"]
    closed = _per_ask(pg_db, "SELECT ask_id, count(*) FROM askcards_outboxevent WHERE type = 'ask.closed'",
                      list(asks.values()))
    assert closed == {asks["live"]: 1, asks["due"]: 1}
    assert sum(output["expired"] for output in outputs if "expired" in output) == 1
    rows = {ask_id: (status, reason, result) for ask_id, status, reason, result in pg_db.query(
        "SELECT id, status, reason, result FROM askcards_ask WHERE id = ANY(%s)", list(asks.values())
    )}
    status, reason, result = rows[asks["live"]]
    assert (status, reason) == ("answered", "completed")
    assert [r["status"] for r in result["collection"]["responses"]] == ["submitted"] * 5 + ["cancelled"]
    status, reason, result = rows[asks["due"]]
    assert (status, reason, result["collection"]["status"]) == ("expired", "timeout", "expired")
    # Missing: only those who never responded in time (the two late clicks did not count).
    assert [r["status"] for r in result["collection"]["responses"]] == ["submitted"] * EARLY + ["missing"] * 4
    assert "message" in result


def test_dingtalk_late_clicks_on_the_due_collection_are_refused_and_audited(dingtalk_race, pg_db):
    from askcards.surfaces.dingtalk import cards

    setup, _, outputs = dingtalk_race
    assert [_notice(reply) for reply in outputs[3]["replies"]] == [cards.NOTICES[cards.ClickRefusal.CLOSED]] * 2
    ignored = pg_db.query(
        "SELECT detail->>'attempted', count(*) FROM askcards_askevent WHERE kind = 'ignored' AND ask_id = %s GROUP BY 1",
        setup["asks"]["due"],
    )
    assert ignored == [("closed/submitted", 2)]
