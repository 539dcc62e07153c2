"""Faults under load, with several askcards processes on their own PostgreSQL and Redis (issue 14).

The module starts a PostgreSQL cluster and a Redis server of its own (free ports, removed at
teardown), a fake Feishu, and two ``manage.py serve`` processes: A (with the worker) and B
(``--no-worker``). Clients create asks over REST (``tools/call``), answer them with signed Feishu
callbacks and long-poll them, on both processes, while the test:

- stops PostgreSQL for a few seconds and starts it again;
- kills Redis and starts an empty one on the same port;
- makes the platform answer 5xx, then hang past the client's timeout, for a minute.

After each: every acknowledged answer is in the database once, no ask ends twice, every waiter got
its answer (or timed out and a re-read shows the truth), and the same processes serve again; the
figures (requests refused during the fault, seconds to recover) are printed.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests import serving
from tests.conftest import QUESTIONS, require
from tests.scale import harness

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

APP_ID = "cli_faults"
SUBMITTED = "已提交"
HTTP_TIMEOUT = 10  # seconds for any one client request (long-polls: their timeout + this)
SEED = """
import json
from askcards import services
from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN
bot = services.bot_add(platform="feishu", app_id=%(app_id)r, app_secret=%(secret)r, base_url=%(base)r,
                       encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN)
agent, key = services.agent_create(name="fault-agent", bots=[bot])
services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
sessions = {}
for user in ("ou_pg", "ou_redis", "ou_platform"):
    session, _ = services.session_upsert(agent=agent, key=f"feishu-{bot.app_id}-private-{user}", bot=bot)
    services.progress_put(session=session, status="running", title=f"faults {user}")
    sessions[user] = {"id": session.id, "key": session.key}
print(json.dumps({"key": key, "agent_id": agent.id, "sessions": sessions}))
"""


# --------------------------------------------------------------------------------- deployment


@dataclass
class Deployment:
    cluster: harness.PrivateCluster
    redis: harness.PrivateRedis
    db: harness.PgDatabase
    fake: object
    a: str
    b: str
    key: str
    agent_id: int
    sessions: dict


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from tests.fakes.feishu import FakeFeishu

    require(harness.PrivateCluster.binaries() is not None, "PostgreSQL's initdb/pg_ctl are not installed")
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    cluster = harness.PrivateCluster(Path(tempfile.mkdtemp(prefix="askcards-pg-")))
    redis = harness.PrivateRedis()
    with contextlib.ExitStack() as stack:
        stack.callback(cluster.remove)
        stack.callback(redis.kill)
        cluster.init().start()
        redis.start()
        db = cluster.database(tmp_path_factory.mktemp("fault-data"))
        harness.manage(db, "migrate", "--no-input", "-v", "0", timeout=180)
        fake = stack.enter_context(FakeFeishu(app_id=APP_ID))
        env = {**db.env, "REDIS_URL": redis.url}
        seed = serving.shell_json(env, SEED % {"app_id": APP_ID, "secret": fake.app_secret, "base": fake.base_url})
        a = stack.enter_context(serving.serve(env, "--no-migrate", log_dir=tmp_path_factory.mktemp("serve-a")))
        b = stack.enter_context(
            serving.serve(env, "--no-migrate", "--no-worker", log_dir=tmp_path_factory.mktemp("serve-b"))
        )
        deployment = Deployment(cluster, redis, db, fake, a, b, seed["key"], seed["agent_id"], seed["sessions"])
        _until(lambda: len(fake.messages) == len(seed["sessions"]), 30, "the progress cards were never sent")
        yield deployment


def _until(condition, timeout: float, failure: str, every: float = 0.1) -> float:
    """Wait for ``condition()``; returns the seconds it took, fails with ``failure`` after ``timeout``."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, failure
        time.sleep(every)
    return time.monotonic() - start


# ------------------------------------------------------------------------------------ clients


@dataclass
class Attempt:
    kind: str  # create | answer | wait
    server: str
    at: float  # time.monotonic() when the request began
    ok: bool
    ask_id: str = ""
    detail: str = ""
    end: float = field(default_factory=time.monotonic)  # when it returned (recorded then)


@dataclass
class Client:
    """REST and callback calls against the deployment, each recorded as an ``Attempt``."""

    d: Deployment
    user: str
    attempts: list[Attempt] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: itertools.count = field(default_factory=itertools.count)

    @property
    def session(self) -> dict:
        return self.d.sessions[self.user]

    def _record(self, attempt: Attempt) -> Attempt:
        with self.lock:
            self.attempts.append(attempt)
        return attempt

    def create(self, server: str) -> str | None:
        """A new ask on ``server`` (a or b); its id, or None when the request was refused."""
        start = time.monotonic()
        body = {"session": self.session["key"], "name": "ask_user_questions", "arguments": {"questions": QUESTIONS},
                "call_id": f"{self.user}-{next(self.calls)}"}
        try:
            response = requests.post(f"{getattr(self.d, server)}/api/v1/tools/call", json=body,
                                     headers={"Authorization": f"Bearer {self.d.key}"}, timeout=HTTP_TIMEOUT)
            ok = response.status_code == 200 and response.json()["status"] == "pending"
            ask_id, detail = (response.json()["ask"]["id"] if ok else ""), f"{response.status_code}"
        except (requests.RequestException, ValueError) as exc:
            ok, ask_id, detail = False, "", type(exc).__name__
        self._record(Attempt("create", server, start, ok, ask_id, detail))
        return ask_id or None

    def answer(self, server: str, ask_id: str, label: str) -> bool:
        """Alice clicks submit on the card with ``label`` typed in, delivered to ``server``; True when
        the callback was acknowledged as submitted (HTTP 200, toast 已提交)."""
        from tests.feishu.integration import signed_callback

        value = {"kind": "feishu_ask", "act": "submit", "sessionId": self.session["id"], "requestId": ask_id,
                 "sender": self.user}
        body, headers = signed_callback(APP_ID, operator=self.user, value=value, form_value={"c0_0": label})
        start = time.monotonic()
        try:
            response = requests.post(f"{getattr(self.d, server)}/callbacks/feishu/{APP_ID}/", data=body,
                                     headers=headers, timeout=HTTP_TIMEOUT)
            toast = (response.json().get("toast") or {}).get("content") if response.status_code == 200 else None
            ok, detail = toast == SUBMITTED, f"{response.status_code} {toast}"
        except (requests.RequestException, ValueError) as exc:
            ok, detail = False, type(exc).__name__
        self._record(Attempt("answer", server, start, ok, ask_id, f"{label}|{detail}"))
        return ok

    def read(self, ask_id: str) -> dict:
        response = requests.get(f"{self.d.a}/api/v1/asks/{ask_id}", headers={"Authorization": f"Bearer {self.d.key}"},
                                timeout=HTTP_TIMEOUT)
        assert response.status_code == 200, response.text
        return response.json()

    def refused(self, since: float, until: float | None = None) -> Counter:
        with self.lock:
            return Counter(a.kind for a in self.attempts if not a.ok and a.at >= since and (until is None or a.at < until))

    def acknowledged(self) -> dict[str, str]:
        """ask id -> the label of its acknowledged answer."""
        with self.lock:
            return {a.ask_id: a.detail.split("|")[0] for a in self.attempts if a.kind == "answer" and a.ok}


@dataclass
class Waiter:
    """One long-poll ``GET /asks/<id>/wait`` on a thread; what it returned and when."""

    base: str
    key: str
    ask_id: str
    timeout: int
    result: dict = field(default_factory=dict)
    thread: threading.Thread | None = None

    def start(self) -> Waiter:
        def poll() -> None:
            try:
                response = requests.get(
                    f"{self.base}/api/v1/asks/{self.ask_id}/wait", params={"timeout": self.timeout},
                    headers={"Authorization": f"Bearer {self.key}"}, timeout=self.timeout + HTTP_TIMEOUT,
                )
                self.result["status"] = response.status_code
                if response.status_code == 200:
                    self.result["ask"] = response.json()
            except requests.RequestException as exc:
                self.result["error"] = type(exc).__name__
            self.result["at"] = time.monotonic()

        self.thread = threading.Thread(target=poll, daemon=True)
        self.thread.start()
        return self

    def join(self) -> dict:
        self.thread.join(timeout=self.timeout + HTTP_TIMEOUT + 5)
        assert not self.thread.is_alive(), f"the long-poll of {self.ask_id} never returned"
        return self.result

    @property
    def answered(self) -> bool:
        return self.result.get("status") == 200 and self.result["ask"]["status"] == "answered"


def _label(ask: dict) -> str | None:
    result = ask.get("result") or {}
    answers = result.get("answers") or []
    return answers[0].get("customInput") if answers else None


def _parked(redis_port: int, ask_ids: list[str], timeout: float = 10) -> None:
    """Every long-poll's process has subscribed to its ask's channel in Redis (askcards.wake.bus)."""
    import redis

    client = redis.Redis(port=redis_port, socket_timeout=2)
    channels = [f"askcards:0:ask.{a}" for a in ask_ids]
    try:
        _until(lambda: all(count for _, count in client.pubsub_numsub(*channels)), timeout,
               "the long-polls' processes never subscribed to their asks")
    finally:
        client.close()


def _endings(d: Deployment, ask_ids) -> dict[str, tuple]:
    """ask id -> (status, reason, answered label, number of 'closed' audit rows)."""
    rows = d.db.query(
        "SELECT a.id, a.status, a.reason, a.result->'answers'->0->>'customInput', "
        "(SELECT count(*) FROM askcards_askevent e WHERE e.ask_id = a.id AND e.kind = 'closed') "
        "FROM askcards_ask a WHERE a.id = ANY(%s)",
        list(ask_ids),
    )
    return {ask_id: tuple(rest) for ask_id, *rest in rows}


def _closed_at_most_once(d: Deployment) -> None:
    twice = d.db.query(
        "SELECT ask_id, count(*) FROM askcards_askevent WHERE kind = 'closed' GROUP BY ask_id HAVING count(*) > 1"
    )
    assert twice == [], f"asks that ended more than once: {twice}"
    terminal_without_audit = d.db.query(
        "SELECT a.id FROM askcards_ask a WHERE a.status NOT IN ('reserved', 'pending') AND NOT EXISTS "
        "(SELECT 1 FROM askcards_askevent e WHERE e.ask_id = a.id AND e.kind = 'closed')"
    )
    assert terminal_without_audit == []


def _assert_answers_kept(d: Deployment, client: Client) -> None:
    """Every acknowledged answer is the ask's one ending, with the acknowledged label."""
    acknowledged = client.acknowledged()
    endings = _endings(d, acknowledged)
    wrong = {ask_id: endings.get(ask_id) for ask_id, label in acknowledged.items()
             if endings.get(ask_id) != ("answered", "submitted", label, 1)}
    assert wrong == {}, f"acknowledged answers not kept exactly once: {wrong}"


def _assert_created_kept(d: Deployment, client: Client) -> None:
    created = {a.ask_id for a in client.attempts if a.kind == "create" and a.ok}
    stored = {ask_id for (ask_id,) in d.db.query("SELECT id FROM askcards_ask WHERE id = ANY(%s)", list(created))}
    assert created - stored == set(), "asks acknowledged as created are missing"


def _assert_waiters_saw_the_truth(client: Client, waiters: list[Waiter]) -> Counter:
    """Each waiter got its ask answered, or (an error, or still pending at its timeout) a re-read
    now shows the ask as the database has it. Returns how each ended."""
    how = Counter()
    for waiter in waiters:
        result = waiter.join()
        truth = client.read(waiter.ask_id)
        if waiter.answered:
            assert _label(result["ask"]) == _label(truth), waiter.ask_id
            how["woken"] += 1
        elif result.get("status") == 200:  # timed out: it returned the ask as it was, still open
            assert result["ask"]["status"] == truth["status"] == "pending", (result, truth)
            how["timed out"] += 1
        else:  # refused (its re-read met the outage): the client reads again
            assert truth["status"] in ("answered", "pending"), truth
            how["refused, read again"] += 1
    return how


# ------------------------------------------------------------------------------ PostgreSQL

PG_DOWN_SECONDS = 4
PG_RECOVER_WITHIN = 20  # seconds after PostgreSQL is back until both processes serve again


def test_postgres_restart_under_load_loses_nothing_and_recovers(deployment):
    """Two clients create and answer asks on A and B, waiters park on A; PostgreSQL is stopped
    (fast: connections are cut) for a few seconds and started again. Nothing acknowledged is
    lost or ends twice, waiters see the truth, and the same processes serve again."""
    d = deployment
    client = Client(d, "ou_pg")
    before = [client.create(server) for server in ("a", "b", "a", "b", "a", "b")]
    held = [client.create(server) for server in ("a", "b", "a", "b")]  # answered only after the restart, or never
    assert all(before + held), client.attempts
    # Parked on A across the outage: two are answered after it, two time out after it.
    waiters = [Waiter(d.a, d.key, ask_id, timeout=timeout).start() for ask_id, timeout in zip(held, (25, 25, 15, 15))]
    _parked(d.redis.port, held)

    stop = threading.Event()
    labels = itertools.count()
    pending: list[str] = []
    pending_lock = threading.Lock()

    def load(create_on: str, answer_on: str) -> None:
        """Create an ask here, answer the oldest pending one there, over and over."""
        while not stop.is_set():
            ask_id = client.create(create_on)
            with pending_lock:
                if ask_id:
                    pending.append(ask_id)
                target = pending.pop(0) if pending else None
            if target and not client.answer(answer_on, target, f"pg-{next(labels)}"):
                with pending_lock:
                    pending.append(target)  # refused: try it again later
            stop.wait(0.05)

    with pending_lock:
        pending.extend(before)
    threads = [threading.Thread(target=load, args=args, daemon=True) for args in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        stopped_at = time.monotonic()
        d.cluster.stop("fast")
        time.sleep(PG_DOWN_SECONDS)
        d.cluster.start()
        started_at = time.monotonic()

        def serving_again() -> bool:
            with client.lock:
                late = [a for a in client.attempts if a.at >= started_at]
            return all(any(a.ok and a.kind == kind and a.server == server for a in late)
                       for kind in ("create", "answer") for server in ("a", "b"))

        recovered = _until(serving_again, PG_RECOVER_WITHIN, "A and B did not serve again after PostgreSQL returned")
        time.sleep(2)  # steady load after recovery
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

    refused_before = client.refused(0, stopped_at)
    refused_during = client.refused(stopped_at, started_at + recovered)  # begun during the outage or the recovery
    refused_after = client.refused(started_at + recovered)
    # After recovery: one more round on each process, all served; two of the parked waiters answered.
    for server, other in (("a", "b"), ("b", "a")):
        ask_id = client.create(server)
        assert ask_id and client.answer(other, ask_id, f"after-{server}"), client.attempts[-2:]
    for ask_id in held[:2]:
        assert client.answer("b", ask_id, f"held-{ask_id[-4:]}"), client.attempts[-1]
    how = _assert_waiters_saw_the_truth(client, waiters)
    assert [w.answered for w in waiters] == [True, True, False, False], [w.result for w in waiters]

    _assert_answers_kept(d, client)
    _assert_created_kept(d, client)
    _closed_at_most_once(d)
    print(f"\nPostgreSQL down {PG_DOWN_SECONDS} s: {len(client.attempts)} requests; refused before the stop "
          f"{dict(refused_before)} (in flight when it stopped included), during the outage and recovery "
          f"{dict(refused_during)}, after recovery {dict(refused_after)}; both processes served again "
          f"{recovered:.2f} s after PostgreSQL started; waiters {dict(how)}; answers kept {len(client.acknowledged())}")
    assert refused_after == Counter(), "requests failed after the processes had recovered"
    in_flight = [a for a in client.attempts if a.at < started_at and a.end > stopped_at + 1]
    assert in_flight, "no request was under way during the outage: the test proved nothing"


# ----------------------------------------------------------------------------------- Redis

REDIS_DOWN_SECONDS = 3
REDIS_WAKE_WITHIN = 4  # seconds from an answer (or Redis's return) to the waiter's response


def test_redis_restart_wakes_every_waiter_and_loses_nothing(deployment):
    """Long-polls parked on A; Redis is killed, two asks are answered on B meanwhile (their wakes
    are lost), an empty Redis starts on the same port, the rest are answered on B. Every waiter
    returns the answer within seconds, not at its timeout: a long-poll whose process lost the bus
    re-reads, and the process subscribes again. A long-poll begun while Redis is down works too."""
    d = deployment
    client = Client(d, "ou_redis")
    ask_ids = [client.create(server) for server in ("a", "b") * 3]
    assert all(ask_ids), client.attempts
    waiters = {ask_id: Waiter(d.a, d.key, ask_id, timeout=30).start() for ask_id in ask_ids}
    _parked(d.redis.port, ask_ids)
    time.sleep(0.5)
    assert not any(w.result for w in waiters.values()), "a long-poll returned before any answer"

    killed_at = time.monotonic()
    d.redis.kill()
    answered_at = {}
    for ask_id in ask_ids[:2]:
        answered_at[ask_id] = time.monotonic()
        assert client.answer("b", ask_id, f"during-{ask_id[-4:]}")
    late_ask = client.create("b")  # creating asks needs no Redis
    assert late_ask, client.attempts[-1]
    late_waiter = Waiter(d.a, d.key, late_ask, timeout=30).start()  # parked while Redis is down
    time.sleep(REDIS_DOWN_SECONDS)
    d.redis.start()
    back_at = time.monotonic()
    time.sleep(1.5)  # the processes notice Redis is back and subscribe again
    for ask_id in [*ask_ids[2:], late_ask]:
        answered_at[ask_id] = time.monotonic()
        assert client.answer("b", ask_id, f"after-{ask_id[-4:]}")

    waiters[late_ask] = late_waiter
    slow = {}
    for ask_id, waiter in waiters.items():
        result = waiter.join()
        assert waiter.answered, (ask_id, result)
        assert _label(result["ask"]) == client.acknowledged()[ask_id]
        woken_after = result["at"] - max(answered_at[ask_id], back_at if ask_id in ask_ids[:2] else 0)
        if woken_after > REDIS_WAKE_WITHIN:
            slow[ask_id] = round(woken_after, 2)
    _assert_answers_kept(d, client)
    _closed_at_most_once(d)
    lateness = [waiters[a].result["at"] - answered_at[a] for a in ask_ids[2:] + [late_ask]]
    print(f"\nRedis down {REDIS_DOWN_SECONDS} s: requests refused {dict(client.refused(killed_at))}; answered while "
          f"down returned {[round(waiters[a].result['at'] - killed_at, 2) for a in ask_ids[:2]]} s after the kill; "
          f"answered after its return woken in {max(lateness):.2f} s at most")
    assert slow == {}, f"waiters returned late (s): {slow}"
    assert client.refused(killed_at) == Counter()


# -------------------------------------------------------------------------------- platform

OUTAGE_SECONDS = 60  # 5xx for the first half, then every request hangs past the client's timeout
CONVERGE_WITHIN = 150  # seconds after the outage: the card backoff's longest waits (60 s, 120 s) and a push


def _card_message(d: Deployment, user: str) -> tuple[str, int, int, str, int]:
    """The session's progress card message: id, version, synced version, last error, failures in a row."""
    (row,) = d.db.query(
        "SELECT m.message_id, m.version, m.synced_version, m.last_error, m.sync_attempts FROM askcards_cardmessage m "
        "JOIN askcards_progresscard c ON c.id = m.progress_card_id WHERE c.session_id = %s",
        d.sessions[user]["id"],
    )
    return row


def test_platform_outage_for_a_minute_then_cards_converge(deployment):
    """Feishu answers 5xx for 30 s, then hangs every request past the 10 s client timeout for 30 s.
    Meanwhile asks are created on A and B and answered by callbacks (neither needs the platform,
    so none is refused); card pushes fail and back off. After the outage the card shows exactly
    the asks still pending, no ask failed or ended twice, and the pushes were paced, not hammered.

    A push attempt is one platform request, but not always a PATCH: when no tenant token is cached
    (the Redis test before this one restarted Redis empty, and whether a card push fetched a token
    into the new one before this test began is a race), every attempt during the outage is the
    token request, refused like the PATCH would be. So attempts are counted by the card's own
    failures in a row, and the platform's load by every request it got while down."""
    d = deployment
    fake = d.fake
    client = Client(d, "ou_platform")
    message_id, *_, failures_before = _card_message(d, "ou_platform")
    assert message_id, "the progress card was never sent"
    pushes_before = len(fake.calls("PATCH", f"/open-apis/im/v1/messages/{message_id}"))
    platform_before = fake.outage_requests

    fake.outage("5xx", OUTAGE_SECONDS / 2)
    began = time.monotonic()
    switched = threading.Timer(OUTAGE_SECONDS / 2, fake.outage, args=("hang", OUTAGE_SECONDS / 2))
    switched.start()
    # The card's failures are read while the platform is still down, so no push can have succeeded
    # and reset the count: every attempt since the start failed.
    counted: dict[str, int] = {}
    count = threading.Timer(OUTAGE_SECONDS - 1,
                            lambda: counted.setdefault("failures", _card_message(d, "ou_platform")[4]))
    count.start()
    created: list[str] = []
    try:
        round_ = 0
        while time.monotonic() - began < OUTAGE_SECONDS - 2:
            server, other = ("a", "b") if round_ % 2 == 0 else ("b", "a")
            ask_id = client.create(server)
            if ask_id:
                created.append(ask_id)
            if round_ % 3 != 2 and len(created) > 1:  # answer most, leave some pending
                client.answer(other, created[-2], f"outage-{round_}")
            round_ += 1
            time.sleep(4)
        _until(lambda: time.monotonic() - began >= OUTAGE_SECONDS, OUTAGE_SECONDS, "outage never ended")
    finally:
        for timer in (switched, count):
            timer.cancel()
            timer.join(timeout=5)
    assert "failures" in counted, "the card's failures could not be read during the outage"
    failures = counted["failures"] - failures_before
    patches = len(fake.calls("PATCH", f"/open-apis/im/v1/messages/{message_id}")) - pushes_before
    platform = fake.outage_requests - platform_before  # PATCHes and token requests of every card

    def converged() -> bool:
        _, version, synced, *_ = _card_message(d, "ou_platform")
        return version == synced

    took = _until(converged, CONVERGE_WITHIN, "the card never converged after the outage", every=0.5)
    time.sleep(1)  # any push still in flight lands

    message = fake.messages[message_id]
    shown = json.dumps(message.card, ensure_ascii=False)
    endings = _endings(d, created)
    pending = {ask_id for ask_id, (status, *_rest) in endings.items() if status == "pending"}
    answered = {ask_id for ask_id, (status, *_rest) in endings.items() if status == "answered"}
    assert set(endings) == set(created)
    assert {status for status, *_ in endings.values()} <= {"pending", "answered"}, endings
    assert pending and answered
    assert {ask_id for ask_id in created if ask_id in shown} == pending, "the card does not show exactly the open asks"
    assert _card_message(d, "ou_platform")[3] == ""
    _assert_answers_kept(d, client)
    _closed_at_most_once(d)
    refused = client.refused(began)
    print(f"\nplatform down {OUTAGE_SECONDS} s (5xx, then hanging): {len(client.attempts)} requests to askcards, refused "
          f"{dict(refused)}; platform requests refused or held {platform} (all cards); card push attempts "
          f"{failures}, PATCHes of it {patches}; card converged {took:.1f} s after the platform returned "
          f"({len(answered)} answered, {len(pending)} open asks)")
    assert refused == Counter(), "askcards refused requests that do not need the platform"
    # Backoff: 1, 2, 5, 10, 30 s... between attempts (at most 6 in a minute), not one every tick (0.5 s).
    assert 0 < failures <= 10, f"{failures} push attempts of the card in {OUTAGE_SECONDS} s"
    assert platform <= 10 * len(d.sessions), f"{platform} requests to the platform while it was down"
