"""Each hand-written statement (``askcards.db.statements``) against the plain ORM code it replaces.

    .venv/bin/python -m tests.bench.bench_statements [--calls 1000] [--rounds 7] [--submits 1600]
        [--threads 1] [--orm outbox,mark,claim,receipt,close,clicked,pending] [--only TEXT]
        [--targets sqlite,postgres] [--database askcards_bench_statements]

Run from the project directory. Per target, a process of its own with a temporary data dir
(``sqlite``: the embedded SQLite file; ``postgres``: the database ``--database`` on
postgres://postgres@127.0.0.1:5432, created and dropped, with the service's pool and prepared
statements) runs, in each round, every statement ``--calls`` times hand-written and as ORM code
(alternating which goes first), 50 calls per transaction, one thread. It prints per call the
median over the rounds of the wall time and of this process's CPU time, the ORM's extra time, and
each figure over the yardstick's: a one-row ORM read by primary key (``Ask.objects.filter(pk=…)
.exists()``) timed the same way, i.e. what this machine does per statement right then. On
PostgreSQL also the CPU of the database's backends (read from /proc: same machine only).

Then the whole paths the statements serve, in the same process: ``--submits`` signed and encrypted
Feishu submits (``callbacks.feishu_handle``, ``--threads`` at once) and the card pushes they cause
(``FeishuSurface.sync_due`` against ``tests.bench.feishu_stub``), in chunks alternating between the
code as written and the code with the ``--orm`` statements written by the ORM (patched in; one
name, e.g. ``--orm outbox-insert``, measures one statement end to end). Each statement's extra CPU
is printed as a share of its path (on PostgreSQL also with the backends' CPU counted on both
sides). Each run ends with its figures as one line of JSON (for docs/performance.md).

``--runs N`` does all of it N times (a fresh process and database per target each run: ``--rounds``
is taken, by the rounds inside one) and ends with the min / median / max of every figure over the
runs (tests/bench/common.py).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from tests.bench import harness
from tests.bench.common import Figure, add_rounds_argument, check_rounds, run_rounds, say
from tests.bench.harness import PG_SERVER, PROJECT_DIR, PYTHON, pg_admin

PG_DATABASE = "askcards_bench_statements"
BATCH = 50  # calls per transaction


# ------------------------------------------------------------------------------ the pairs


def pairs(calls: int) -> list[tuple[str, Callable[[str], Callable[[int], Any]], Callable[[str], Callable[[int], Any]], Callable[[], None]]]:
    """(name, hand-written, ORM, reset) per statement. Each of the first two takes a run label and
    returns the call to time (taking the call's number); reset runs untimed before each run."""
    from django.utils import timezone

    from askcards import services
    from askcards.db import statements
    from askcards.models import Agent, Ask, AskEvent, CardMessage, ProgressCard, Respondent
    from askcards.surfaces import sync
    from askcards.surfaces.feishu.cards import WITHDRAWN_SHOWN, WITHDRAWN_TEXT
    from askcards.surfaces.feishu.surface import MAX_FORMS
    from tests.bench.harness import QUESTIONS

    agent, _ = services.agent_create(name="bench")
    services.agent_quotas_set(agent=agent, actor="bench", **{quota: 0 for quota in services.QUOTAS})
    Agent.objects.filter(pk=agent.pk).update(webhook_url="https://agent.example.com/hook")
    bot = services.bot_add(platform="feishu", app_id="cli_statements", app_secret="bench-secret")
    services.agent_bot_grant(agent=agent, bot=bot, actor="bench")
    sessions = []
    for number in range(100):
        session, _ = services.session_upsert(agent=agent, key=f"wechat/user{number}", platform="wechat", user_id=f"u{number}")
        card = ProgressCard.objects.create(session=session)
        CardMessage.objects.create(platform="feishu", bot=bot, progress_card=card, message_id=f"om_mark_{number}")
        sessions.append(session.pk)
    ask = Ask.objects.create(agent=agent, session_id=sessions[0], tool="ask_user_questions",
                             deadline=timezone.now() + timedelta(hours=1))
    claim_card = ProgressCard.objects.create(session_id=sessions[0])
    CardMessage.objects.bulk_create(
        CardMessage(platform="feishu", bot=bot, progress_card=claim_card, message_id=f"om_claim_{number}", version=1)
        for number in range(calls)
    )
    claimable = list(CardMessage.objects.filter(message_id__startswith="om_claim_").order_by("pk").values_list("pk", "message_id"))
    # A Feishu private chat's card with two pending asks (a card of harness.seed_cards
    # has five, answered one by one: a render after a submit finds four to none, two on average).
    clicked_session, _ = services.session_upsert(agent=agent, key="feishu-cli_statements-private-ou_click", bot=bot)
    clicked_card = ProgressCard.objects.create(session=clicked_session)
    CardMessage.objects.create(platform="feishu", bot=bot, progress_card=clicked_card, message_id="om_clicked", version=1,
                               synced_version=1)
    clicked = [
        Ask.objects.create(agent=agent, session=clicked_session, tool="ask_user_questions", status=Ask.Status.PENDING,
                           sender_id="ou_click", questions=QUESTIONS, surfaces=["feishu"],
                           deadline=timezone.now() + timedelta(hours=1)).pk
        for _ in range(2)
    ]
    # Asks that each close call answers (reopened before each run), one respondent each, as a
    # Feishu or panel answer closes them (services.ask_answer).
    closing = Ask.objects.bulk_create(
        Ask(agent=agent, session_id=sessions[1], tool="ask_user_questions", status=Ask.Status.PENDING,
            sender_id="ou_close", questions=QUESTIONS, deadline=timezone.now() + timedelta(hours=1))
        for _ in range(calls)
    )
    Respondent.objects.bulk_create(Respondent(ask=row, respondent_id="ou_close", respondent_key="ou_close") for row in closing)
    closing = [row.pk for row in closing]
    answers = [{"question": q["question"], "selectedLabels": [q["options"][0]["label"]], "customInput": ""}
               for q in QUESTIONS]
    detail = {"reason": "submitted"}

    def nothing() -> None:
        pass

    def unclaim() -> None:
        CardMessage.objects.filter(message_id__startswith="om_claim_").update(next_sync_at=None)

    def reopen() -> None:
        Ask.objects.filter(sender_id="ou_close").update(status=Ask.Status.PENDING, reason="", closed_at=None, result=None)
        Respondent.objects.filter(respondent_key="ou_close").update(
            status=Respondent.Status.PENDING, answers=None, answered_at=None, surface=""
        )

    event = {"type": "ask.closed", "ask": ask, "session": None, "data": detail}

    # outbox.append: bump the agent's counter, insert the event with it.
    def outbox_hand(_label):
        return lambda i: statements.outbox_event_insert(agent_id=agent.pk, **event, next_attempt_at=timezone.now())

    def outbox_orm(_label):
        return lambda i: _orm_outbox_event_insert(agent_id=agent.pk, **event, next_attempt_at=timezone.now())

    def outbox_bump_then_create(_label):
        return lambda i: _split_outbox_event_insert(agent_id=agent.pk, **event, next_attempt_at=timezone.now())

    # The bump alone.
    def bump_hand(_label):
        return lambda i: statements.agent_event_seq_bump(agent.pk)

    def bump_orm(_label):
        return lambda i: _orm_agent_event_seq_bump(agent.pk)

    # FeishuSurface.mark: one more render of the session's latest progress card.
    def mark_hand(_label):
        return lambda i: statements.progress_card_mark(session_id=sessions[i % len(sessions)])

    def mark_orm(_label):
        return lambda i: _orm_feishu_mark(None, SimpleNamespace(session_id=sessions[i % len(sessions)]))

    # sync.claim_card_message (Feishu's, with the message id that must not have changed).
    def claim_hand(_label):
        def call(i):
            now = timezone.now()
            pk, message_id = claimable[i]
            assert statements.card_message_claim(pk, until=now + sync.CARD_CLAIM, now=now, message_id=message_id)
        return call

    def claim_orm(_label):
        def call(i):
            pk, message_id = claimable[i]
            assert _orm_claim_card_message(pk, timezone.now(), message_id=message_id)
        return call

    # services.callback_receipt, inside the callback's transaction; a new event id each time.
    def receipt_hand(label):
        return lambda i: statements.callback_receipt_insert(platform="feishu", event_id=f"{label}-{i}", created_at=timezone.now())

    def receipt_orm(label):
        return lambda i: _orm_callback_receipt_insert(platform="feishu", event_id=f"{label}-{i}", created_at=timezone.now())

    # services.asks.close as an answer calls it: the ask answered, its respondent submitted, the audit row.
    def close_args(i):
        now = timezone.now()
        return dict(
            from_status=Ask.Status.PENDING,
            changes={"status": Ask.Status.ANSWERED, "reason": Ask.Reason.SUBMITTED, "closed_at": now,
                     "result": {"answers": answers}},
            respondent=("ou_close", {"status": Respondent.Status.SUBMITTED, "answers": answers, "answered_at": now,
                                     "surface": "feishu"}),
            missing=False,
            audit={"kind": AskEvent.Kind.CLOSED, "from_status": Ask.Status.PENDING, "to_status": Ask.Status.ANSWERED,
                   "actor": "respondent:ou_close", "surface": "feishu", "detail": {"reason": "submitted"},
                   "created_at": now},
        )

    def close_hand(_label):
        def call(i):
            assert statements.ask_close(closing[i], **close_args(i))
        return call

    def close_orm(_label):
        def call(i):
            assert _orm_ask_close(closing[i], **close_args(i))
        return call

    # services.feishu_callback (its submit)'s read (selectors.clicked_ask): the ask, its session, the clicked card.
    def clicked_hand(_label):
        def call(i):
            ask, card = statements.clicked_ask(ask_id=clicked[i % 2], bot_id=bot.pk, platform="feishu", message_id="om_clicked")
            assert ask.session.bot_id == bot.pk and card.pk == clicked_card.pk
        return call

    def clicked_orm(_label):
        def call(i):
            ask, card = _orm_clicked_ask(ask_id=clicked[i % 2], bot_id=bot.pk, platform="feishu", message_id="om_clicked")
            assert ask.session.bot_id == bot.pk and card.pk == clicked_card.pk
        return call

    # FeishuSurface.render's forms (the card rendered into a submit's response).
    shown = {"pending": MAX_FORMS + 1, "withdrawn_reasons": tuple(WITHDRAWN_TEXT), "withdrawn": WITHDRAWN_SHOWN * 3}

    def pending_hand(_label):
        def call(i):
            assert len(statements.card_asks([clicked_session.pk], **shown)[clicked_session.pk][0]) == 2
        return call

    def pending_orm(_label):
        def call(i):
            assert len(_orm_card_asks([clicked_session.pk], **shown)[clicked_session.pk][0]) == 2
        return call

    def yardstick(_label):
        return lambda i: Ask.objects.filter(pk=ask.pk).exists()

    return [
        ("yardstick: one-row ORM read by pk", yardstick, yardstick, nothing),
        ("outbox event: bump seq + insert", outbox_hand, outbox_orm, nothing),
        ("outbox, its INSERT: hand / ORM create", outbox_hand, outbox_bump_then_create, nothing),
        ("outbox, its bump: hand / ORM update+read", bump_hand, bump_orm, nothing),
        ("Feishu mark: latest card version + 1", mark_hand, mark_orm, nothing),
        ("card claim: conditional UPDATE", claim_hand, claim_orm, unclaim),
        ("callback receipt: insert or not", receipt_hand, receipt_orm, nothing),
        ("ask close: ask, respondent, audit row", close_hand, close_orm, reopen),
        ("clicked ask: ask + session + card", clicked_hand, clicked_orm, nothing),
        ("card asks: pending + withdrawn", pending_hand, pending_orm, nothing),
    ]


def backends_cpu() -> dict[int, float] | None:
    """PostgreSQL: CPU seconds so far of each backend connected to this process's database (None
    on another database). Read between timings, never inside one (it walks /proc)."""
    from django.db import connection

    from tests.bench.harness import postgres_backends

    if connection.vendor != "postgresql":
        return None
    return postgres_backends(connection.settings_dict["NAME"])


def backends_used(before: dict[int, float] | None) -> float:
    """The backends' CPU seconds since ``before`` (0 on another database). A backend that ended
    in between is not counted (the pool keeps them: rare)."""
    from tests.bench.harness import postgres_cpu_between

    return 0.0 if before is None else postgres_cpu_between(before, backends_cpu())[0]


def timed(make: Callable[[str], Callable[[int], Any]], label: str, calls: int) -> tuple[float, float, float]:
    """Seconds per call (wall, CPU, PostgreSQL backends' CPU) of ``calls`` calls, ``BATCH`` per
    transaction. The backends' CPU (the kernel's 10 ms ticks) covers the commits too."""
    from django.db import transaction

    call = make(label)
    wall = cpu = 0.0
    backends = backends_cpu()
    for first in range(0, calls, BATCH):
        with transaction.atomic():
            started, started_cpu = time.perf_counter(), time.process_time()
            for i in range(first, min(calls, first + BATCH)):
                call(i)
            wall += time.perf_counter() - started
            cpu += time.process_time() - started_cpu
    return wall / calls, cpu / calls, backends_used(backends) / calls


# ----------------------------------------------------------- whole submits and pushes, A/B


# The ORM code each statement replaces.


def _orm_agent_event_seq_bump(agent_id: int) -> tuple[int, str]:
    from django.db.models import F

    from askcards.models import Agent

    Agent.objects.filter(pk=agent_id).update(event_seq=F("event_seq") + 1)
    return Agent.objects.filter(pk=agent_id).values_list("event_seq", "webhook_url").get()


def _orm_outbox_event_insert(*, agent_id: int, **values) -> None:
    from askcards.models import OutboxEvent

    seq, webhook_url = _orm_agent_event_seq_bump(agent_id)
    if not webhook_url:
        values["next_attempt_at"] = None
    OutboxEvent.objects.create(**{**values, "agent_id": agent_id, "seq": seq})


def _orm_feishu_mark(self, ask) -> None:
    from django.db.models import F, Subquery

    from askcards.models import CardMessage, ProgressCard

    latest = ProgressCard.objects.filter(session_id=ask.session_id).order_by("-id").values("id")[:1]
    CardMessage.objects.filter(progress_card_id=Subquery(latest)).update(version=F("version") + 1)


def _orm_claim_card_message(pk: int, now, **unchanged) -> bool:
    from django.db.models import F, Q

    from askcards.surfaces import sync
    from askcards.models import CardMessage

    return bool(
        CardMessage.objects.filter(pk=pk, version__gt=F("synced_version"), **unchanged)
        .filter(Q(next_sync_at__isnull=True) | Q(next_sync_at__lte=now))
        .update(next_sync_at=now + sync.CARD_CLAIM)
    )


def _orm_callback_receipt_insert(*, platform: str, event_id: str, created_at) -> bool:
    """services.callback_receipt before 270d93b: the ORM's INSERT in a savepoint (SAVEPOINT and
    RELEASE: two more round trips) that a duplicate's IntegrityError rolls back."""
    from django.db import IntegrityError, transaction

    from askcards.models import CallbackReceipt

    try:
        with transaction.atomic():
            CallbackReceipt.objects.create(platform=platform, event_id=event_id, created_at=created_at)
    except IntegrityError:
        return False
    return True


def _orm_ask_close(pk: str, *, from_status: str, changes: dict[str, Any], respondent, missing: bool, audit: dict[str, Any]) -> bool:
    """services.asks.close's writes before c8042b7 (what statements.ask_close still does on SQLite):
    the ask's conditional UPDATE, then the respondents' UPDATEs and the audit row's INSERT."""
    from askcards.models import Ask, AskEvent, Respondent

    if not Ask.objects.filter(pk=pk, status__in=(from_status,)).update(**changes):
        return False
    if respondent is not None:
        key, values = respondent
        Respondent.objects.filter(ask_id=pk, respondent_key=key, status=Respondent.Status.PENDING).update(**values)
    if missing:
        Respondent.objects.filter(ask_id=pk, status=Respondent.Status.PENDING).update(status=Respondent.Status.MISSING)
    AskEvent.objects.create(ask_id=pk, **audit)
    return True


def _orm_clicked_ask(*, ask_id: str, bot_id: int, platform: str, message_id: str) -> tuple[Any, Any]:
    """services.feishu_callback (its submit)'s reads before 23333c0: the ask with its session (select_related),
    then the progress card by the clicked message (selectors.clicked_progress_card with the session known)."""
    from askcards import selectors
    from askcards.models import Ask, ProgressCard

    ask = selectors.unique_row(Ask.objects.select_related("session").filter(pk=ask_id, session__bot_id=bot_id))
    if ask is None:
        return None, None
    card = None
    if message_id:
        card = selectors.unique_row(ProgressCard.objects.filter(
            card_messages__platform=platform, card_messages__bot_id=bot_id, card_messages__message_id=message_id
        ))
    return ask, card


def _orm_card_asks(session_ids: list[str], *, pending: int, withdrawn_reasons: tuple[str, ...],
                   withdrawn: int) -> dict[str, tuple[list[Any], list[Any]]]:
    """What a card shows of its session's asks before this statement, for one session as a
    submit's response card reads it: surface.pending_asks() for the session, then the withdrawn
    asks (surface.withdrawn_asks' ORM query, less its closed_at bound)."""
    from askcards.models import Ask

    found = {}
    for session_id in session_ids:
        rows = list(
            Ask.objects.filter(status=Ask.Status.PENDING).order_by("created_at", "id")
            .only("id", "session_id", "questions", "sender_id", "surfaces").filter(session_id=session_id)[:pending]
        )
        gone = list(
            Ask.objects.filter(session_id=session_id, status=Ask.Status.CANCELLED, reason__in=list(withdrawn_reasons),
                               activated_at__isnull=False)
            .order_by("-closed_at", "-id").only("id", "questions", "reason", "surfaces", "closed_at")[:withdrawn]
        )
        if rows or gone:
            found[session_id] = (rows, gone)
    return found


def _split_outbox_event_insert(*, agent_id: int, **values) -> None:
    """The hand-written bump, then the event inserted by the ORM (PostgreSQL's one statement split)."""
    from askcards.db import statements
    from askcards.models import OutboxEvent

    seq, webhook_url = statements.agent_event_seq_bump(agent_id)
    if not webhook_url:
        values["next_attempt_at"] = None
    OutboxEvent.objects.create(**{**values, "agent_id": agent_id, "seq": seq})


ORM_NAMES = ("outbox", "outbox-insert", "mark", "claim", "receipt", "close", "clicked", "pending")


def orm_patches(names: set[str]) -> list[tuple[Any, str, Any]]:
    """(object, attribute, ORM replacement) for the named hand-written statements on the Feishu
    paths: wherever the statement's function is bound in askcards' modules (``from … import``
    included), and the call sites that still write their statement out themselves.
    ``outbox-insert`` keeps the hand-written bump and inserts the event by the ORM."""
    from askcards.db import statements
    from askcards.surfaces import sync
    from askcards.surfaces.feishu.surface import FeishuSurface

    replacements = {
        getattr(statements, function): replacement
        for key, function, replacement in (
            ("receipt", "callback_receipt_insert", _orm_callback_receipt_insert),
            ("close", "ask_close", _orm_ask_close),
            ("clicked", "clicked_ask", _orm_clicked_ask),
            ("pending", "card_asks", _orm_card_asks),
        )
        if key in names
    }
    if "outbox" in names or "outbox-insert" in names:
        replacements[statements.outbox_event_insert] = (
            _orm_outbox_event_insert if "outbox" in names else _split_outbox_event_insert
        )
    patches = []
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("askcards"):
            for name, value in list(vars(module).items()):
                for original, replacement in replacements.items():
                    if value is original:
                        patches.append((module, name, replacement))
    patches += [
        patch
        for key, patch in (
            ("mark", (FeishuSurface, "mark", _orm_feishu_mark)),
            ("claim", (sync, "claim_card_message", _orm_claim_card_message)),
        )
        if key in names
    ]
    for target, name, _ in patches:
        if not hasattr(target, name):
            raise RuntimeError(f"{target!r} has no {name} any more: update bench_statements.orm_patches")
    unbound = set(replacements.values()) - {replacement for _, _, replacement in patches}
    if unbound:
        raise RuntimeError(f"no askcards module binds what {sorted(f.__name__ for f in unbound)} replace: update orm_patches")
    return patches


class Patched:
    def __init__(self, patches: list[tuple[Any, str, Any]]):
        self.patches, self.saved = patches, []

    def __enter__(self):
        self.saved = [(target, name, getattr(target, name)) for target, name, _ in self.patches]
        for target, name, replacement in self.patches:
            setattr(target, name, replacement)

    def __exit__(self, *exc):
        for target, name, original in reversed(self.saved):
            setattr(target, name, original)


def seed_submits(count: int, stub_base: str) -> list[Any]:
    """``count`` pending asks on Feishu progress cards (5 per card, already sent and in sync:
    ``harness.seed_cards_here``, as bench_feishu_callback's seeding process makes them) and the
    submit requests answering them, in round-robin order over the cards."""
    from askcards import services
    from askcards.models import Agent

    agent = Agent.objects.get(name="bench")
    bot = services.bot_add(platform="feishu", app_id=harness.APP_ID, app_secret=harness.APP_SECRET, base_url=stub_base,
                           verification_token=harness.VERIFICATION_TOKEN, encrypt_key=harness.ENCRYPT_KEY)
    services.agent_bot_grant(agent=agent, bot=bot, actor="bench")
    per_card = 5
    order, _ = harness.seed_cards_here(agent, bot, count // per_card, per_card, harness.QUESTIONS, "bench")
    return [harness.PendingSubmit(*row) for row in order]


def whole(submits: list[Any], chunk: int, rounds: int, orm: set[str], threads: int) -> dict[str, Any]:
    """Per Feishu submit (``callbacks.feishu_handle``: verify, decrypt, parse, receipt, answer,
    render; on ``threads`` threads at once) and per card push (``FeishuSurface.sync_due``: claim,
    render, PATCH to the stub, bookkeeping): wall seconds (a chunk's, over its submits: the inverse
    of the throughput) and CPU seconds, the statements as written against ``orm`` by the ORM."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import close_old_connections
    from django.utils import timezone
    from django.utils.datastructures import CaseInsensitiveMapping

    from askcards import callbacks
    from askcards.surfaces.base import SyncReport
    from askcards.surfaces.feishu.surface import FeishuSurface

    def submit(request):
        body, headers = request
        try:
            return callbacks.feishu_handle(harness.APP_ID, CaseInsensitiveMapping(headers), body)
        finally:
            close_old_connections()  # as askcards.db.in_pool does around each request

    surface = FeishuSurface()
    patches = orm_patches(orm)
    samples: dict[str, dict[str, list[tuple[float, float, float]]]] = {"submit": {}, "push": {}}
    queue = iter(submits)
    with ThreadPoolExecutor(threads) as pool:
        for number in range(rounds):
            for variant in (("hand", "orm") if number % 2 == 0 else ("orm", "hand")):
                requests = [harness.submit_request(next(queue)) for _ in range(chunk)]
                with Patched(patches if variant == "orm" else []):
                    backends = backends_cpu()
                    started, started_cpu = time.perf_counter(), time.process_time()
                    responses = list(pool.map(submit, requests))
                    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
                    samples["submit"].setdefault(variant, []).append((wall / chunk, cpu / chunk, backends_used(backends) / chunk))
                    for status, data in responses:
                        problem = harness.check_submit_response(status, json.dumps(data).encode())
                        if problem:
                            raise RuntimeError(f"submit failed: {problem}")
                    pushed = 0
                    backends = backends_cpu()
                    started, started_cpu = time.perf_counter(), time.process_time()
                    while True:
                        done = surface.sync_due(timezone.now(), SyncReport())
                        if not done:
                            break
                        pushed += done
                    if pushed != chunk:
                        raise RuntimeError(f"{pushed} pushes for {chunk} submits on as many cards")
                    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
                    samples["push"].setdefault(variant, []).append((wall / pushed, cpu / pushed, backends_used(backends) / pushed))
    return {what: {variant: medians(runs) for variant, runs in by_variant.items()} for what, by_variant in samples.items()}


def medians(runs: list[tuple[float, float, float]]) -> dict[str, float]:
    """µs: the medians of (wall, CPU, PostgreSQL backends' CPU) seconds."""
    return {key: statistics.median(run[n] for run in runs) * 1e6 for n, key in enumerate(("wall_us", "cpu_us", "pg_cpu_us"))}


def measure(calls: int, rounds: int, submits: int, stub_base: str, orm: set[str], threads: int, only: str) -> dict[str, Any]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    figures: dict[str, Any] = {"vendor": connection.vendor, "statements": {}}
    runs: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    table = pairs(calls)
    table = table[:1] + [pair for pair in table[1:] if only in pair[0]]
    timed(table[0][1], "warm", min(calls, 200))  # the connection (PostgreSQL: its pool)
    for number in range(rounds):
        for name, by_hand, by_orm, reset in table:
            order = [("hand", by_hand), ("orm", by_orm)] if number % 2 == 0 else [("orm", by_orm), ("hand", by_hand)]
            for variant, make in order:
                reset()
                if number == 0:
                    timed(make, f"{variant}-warm", min(calls, 100))
                    reset()
                runs.setdefault(name, {}).setdefault(variant, []).append(timed(make, f"{variant}-{number}", calls))
    for name, by_variant in runs.items():
        figures["statements"][name] = {variant: medians(samples) for variant, samples in by_variant.items()}
    if submits:
        from askcards.models import CardMessage

        # The statements' own cards point at the real Feishu: no sync may pick them up.
        CardMessage.objects.filter(bot__app_id="cli_statements").delete()
        if connection.vendor == "postgresql":
            # The pairs left dead rows behind (every close reopened, every mark counted up), which
            # autovacuum clears in service, in its own time: cleared here so the paths do not read
            # through them.
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE")
        chunk = submits // (2 * rounds + 2)
        pending = seed_submits(chunk * (2 * rounds + 2), stub_base)
        whole(pending[: 2 * chunk], chunk, 1, orm, threads)  # warm: the bot cache, the stub's token, the clients
        figures["whole"] = whole(pending[2 * chunk :], chunk, rounds, orm, threads)
        figures["whole_orm"], figures["threads"] = sorted(orm), threads
    return figures


# Hand-written statements per Feishu submit (the receipt, the clicked ask, the close, the outbox
# event, the mark, the response card's forms) and per card push (the claim).
PER_SUBMIT = {
    "outbox event: bump seq + insert": ("submit", 1),
    "outbox, its INSERT: hand / ORM create": ("submit", 1),
    "outbox, its bump: hand / ORM update+read": ("submit", 1),
    "Feishu mark: latest card version + 1": ("submit", 1),
    "card claim: conditional UPDATE": ("push", 1),
    "callback receipt: insert or not": ("submit", 1),
    "ask close: ask, respondent, audit row": ("submit", 1),
    "clicked ask: ask + session + card": ("submit", 1),
    "card asks: pending + withdrawn": ("submit", 1),
}


def report(target: str, figures: dict[str, Any]) -> None:
    rows = figures["statements"]
    yard = next(iter(rows.values()))["hand"]
    whole = figures.get("whole")
    pg = figures["vendor"] == "postgresql"
    say(f"\n[{target}] µs per call, median of the rounds (× the yardstick's); ORM extra = ORM − hand-written"
        + ("; PG: the database's backends' CPU, +PG: the share with it counted on both sides" if pg else ""))
    say(f"  {'statement':40} {'hand wall':>16} {'ORM wall':>16} {'extra wall':>10} {'hand CPU':>9} {'ORM CPU':>9} "
        f"{'extra CPU':>10}" + (f" {'PG hand':>8} {'PG ORM':>8}" if pg else "") + f"  {'share of its path (CPU)':>24}"
        + (f" {'+PG':>7}" if pg else ""))
    for name, variants in rows.items():
        hand, orm = variants["hand"], variants["orm"]
        share = with_pg = ""
        if whole and name in PER_SUBMIT:
            path, per = PER_SUBMIT[name]
            written = whole[path]["hand"]
            share = f"{per * (orm['cpu_us'] - hand['cpu_us']) / written['cpu_us']:7.1%} of a {path}"
            with_pg = f"{per * (orm['cpu_us'] + orm['pg_cpu_us'] - hand['cpu_us'] - hand['pg_cpu_us']) / (written['cpu_us'] + written['pg_cpu_us']):7.1%}"
        say(
            f"  {name:40} {hand['wall_us']:8.1f} ({hand['wall_us'] / yard['wall_us']:4.2f}×) "
            f"{orm['wall_us']:8.1f} ({orm['wall_us'] / yard['wall_us']:4.2f}×) {orm['wall_us'] - hand['wall_us']:10.1f} "
            f"{hand['cpu_us']:9.1f} {orm['cpu_us']:9.1f} {orm['cpu_us'] - hand['cpu_us']:10.1f}"
            + (f" {hand['pg_cpu_us']:8.1f} {orm['pg_cpu_us']:8.1f}" if pg else "") + f"  {share:>24}"
            + (f" {with_pg:>7}" if pg else "")
        )
    if whole:
        say(f"  whole paths, µs (× the yardstick's), {figures['threads']} submit(s) at once (wall: the chunk's over its "
            f"submits): as written / with {', '.join(figures['whole_orm'])} by the ORM, and the ORM's extra")
        for path, variants in whole.items():
            hand, orm = variants["hand"], variants["orm"]
            say(
                f"  {'Feishu ' + path:40} wall {hand['wall_us']:8.1f} ({hand['wall_us'] / yard['wall_us']:5.2f}×) / "
                f"{orm['wall_us']:8.1f}  +{orm['wall_us'] / hand['wall_us'] - 1:6.1%};  CPU {hand['cpu_us']:8.1f} / "
                f"{orm['cpu_us']:8.1f}  +{orm['cpu_us'] / hand['cpu_us'] - 1:6.1%}"
                + (f";  PG CPU {hand['pg_cpu_us']:7.1f} / {orm['pg_cpu_us']:7.1f}" if pg else "")
            )


def figures_of(target: str, figures: dict[str, Any]) -> list[Figure]:
    """One target's figures, for the summary over the runs: µs of CPU per call as written and by the
    ORM, and each statement's share of its path; the whole paths' CPU both ways."""
    found: list[Figure] = []
    whole = figures.get("whole")
    for name, variants in figures["statements"].items():
        hand, orm = variants["hand"], variants["orm"]
        found += [Figure(f"{target}: {name}: hand CPU", hand["cpu_us"], "µs"),
                  Figure(f"{target}: {name}: ORM CPU", orm["cpu_us"], "µs")]
        if whole and name in PER_SUBMIT:
            path, per = PER_SUBMIT[name]
            share = per * (orm["cpu_us"] - hand["cpu_us"]) / whole[path]["hand"]["cpu_us"]
            found.append(Figure(f"{target}: {name}: ORM extra, share of a {path}", share * 100, "%"))
    for path, variants in (whole or {}).items():
        hand, orm = variants["hand"], variants["orm"]
        found += [Figure(f"{target}: Feishu {path}: CPU as written", hand["cpu_us"], "µs"),
                  Figure(f"{target}: Feishu {path}: CPU with the ORM", orm["cpu_us"], "µs"),
                  Figure(f"{target}: Feishu {path}: wall as written", hand["wall_us"], "µs")]
        if figures["vendor"] == "postgresql":
            found.append(Figure(f"{target}: Feishu {path}: PostgreSQL CPU as written", hand["pg_cpu_us"], "µs"))
    return found


def run_target(target: str, args: argparse.Namespace, stub_base: str) -> dict[str, Any] | None:
    data_dir = Path(tempfile.mkdtemp(prefix=f"askcards-bench-statements-{target}-"))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG"}}
    env.update({"ASKCARDS_DATA_DIR": str(data_dir), "ASKCARDS_SECRET_KEY": "bench",
                "DJANGO_SETTINGS_MODULE": "project.settings", "LOG_LEVEL": "WARNING"})
    try:
        if target == "postgres":
            try:
                pg_admin(f"DROP DATABASE IF EXISTS {args.database} WITH (FORCE)")
                pg_admin(f"CREATE DATABASE {args.database}")
            except Exception as exc:  # noqa: BLE001 - no PostgreSQL: skip the target
                say(f"skipping postgres: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
                return None
            env["DATABASE_URL"] = f"{PG_SERVER}/{args.database}"
        say(f"[{target}] {args.rounds} rounds of {args.calls} calls per statement and variant, "
            f"{args.submits} Feishu submits …")
        proc = subprocess.run(
            [PYTHON, "-m", "tests.bench.bench_statements", "--child", "--calls", str(args.calls), "--rounds",
             str(args.rounds), "--submits", str(args.submits), "--stub-base", stub_base, "--orm", args.orm,
             "--threads", str(args.threads), "--only", args.only],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the {target} run failed ({proc.returncode}):\n{proc.stderr[:2000]}\n…\n{proc.stderr[-3000:]}")
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        report(target, figures)
        return figures
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        if target == "postgres" and "DATABASE_URL" in env:
            pg_admin(f"DROP DATABASE IF EXISTS {args.database} WITH (FORCE)")


def database_name(text: str) -> str:
    """A PostgreSQL database name to put in CREATE / DROP DATABASE as it is: plain lower-case only."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", text):
        raise argparse.ArgumentTypeError("lower-case letters, digits and underscores")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per statement, variant and round, default 1000")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (the median is printed), default 7")
    parser.add_argument("--submits", type=int, default=1600,
                        help="Feishu submits (and as many pushes) in all for the whole-path figures, 0 for none; default 1600")
    parser.add_argument("--orm", default="outbox,mark,claim,receipt,close,clicked,pending",
                        help=f"whole paths: the statements the ORM variant writes by the ORM, of {','.join(ORM_NAMES)}; "
                        "default all but outbox-insert")
    parser.add_argument("--threads", type=int, default=1, help="whole paths: submits at once, default 1")
    parser.add_argument("--only", default="", help="time only the statements whose name contains this (and the yardstick)")
    parser.add_argument("--targets", default="sqlite,postgres", help="sqlite and/or postgres, default both")
    parser.add_argument("--database", default=PG_DATABASE, type=database_name,
                        help=f"postgres: the database to create and drop, default {PG_DATABASE}")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stub-base", default="", help=argparse.SUPPRESS)
    add_rounds_argument(parser, "--runs")
    args = parser.parse_args()
    check_rounds(parser, args.repeat, "--runs")
    if args.child:
        orm = set(filter(None, args.orm.split(",")))
        if orm - set(ORM_NAMES):
            parser.error(f"--orm takes names of {', '.join(ORM_NAMES)}")
        print(json.dumps(measure(args.calls, args.rounds, args.submits, args.stub_base, orm, args.threads, args.only)))
        return
    run_rounds("askcards statements benchmark", args.repeat, lambda _: one_run(args), word="run",
               note=f"{args.rounds} rounds of {args.calls} calls per statement and variant in each run, "
                    f"{args.submits} Feishu submits")


def one_run(args: argparse.Namespace) -> list[Figure]:
    """A Feishu stand-in and every target in a process of its own, printed; the figures."""
    say(f"load average at start: {os.getloadavg()}")
    stub = subprocess.Popen([PYTHON, "-m", "tests.bench.feishu_stub"], cwd=PROJECT_DIR, stdout=subprocess.PIPE)
    try:
        stub_base = f"http://127.0.0.1:{harness.read_stub_port(stub)}"
        results = {target: run_target(target, args, stub_base) for target in args.targets.split(",")}
    finally:
        stub.terminate()
        stub.wait(timeout=15)
        if stub.stdout is not None:
            stub.stdout.close()
    say(f"load average at end: {os.getloadavg()}")
    say(json.dumps({target: figures for target, figures in results.items() if figures}))
    return [figure for target, figures in results.items() if figures for figure in figures_of(target, figures)]


if __name__ == "__main__":
    sys.exit(main())
