"""One actor of the multi-process tests, run as ``python -m tests.scale.race_actor ROLE ...`` from
the project directory with DATABASE_URL (and optionally REDIS_URL) of the database under test.

Roles (each prints one JSON line on stdout):

- ``setup --agent NAME --asks K [--past] [--webhook-url URL]``: create an agent, a web session and
  K pending asks through ``services.tool_call`` (the real path; the session is made reachable on
  tests.surfaces.RecordingSurface in this process). ``--past`` moves their deadlines into the past.
  Prints agent id, key, webhook secret, session id and ask ids.
- ``act ROLE --start T [--surface S] [--label L] [--slot S] [--jitter J] ASK_ID...`` with ROLE
  answer/cancel/expire: load the asks, then try the transition on ask i at the wall-clock instant
  T + i*slot (+ up to J seconds of jitter), so every ask is a fresh race between the processes.
  Prints ``{"won": [...], "lost": [...], "errors": {...}}``.
- ``work --start T [--max-seconds S] [--idle-steps N] [--claim-seconds C] [--webhook-timeout W]``:
  run ``Worker().step()`` from T until N steps in a row found nothing to do, or S seconds passed.
  Prints steps and work done. C and W shrink the outbox claim window and the webhook timeout.

Platform callback roles (``test_platform_races``) run with the project's real surface list
(``--real-surfaces`` on ``act`` does the same), so Feishu and DingTalk asks mark their cards:

- ``feishu-setup --agent NAME --app-id A --session USER=K ...``: a Feishu bot (base_url unreachable:
  callbacks never call Feishu), per USER a private session with a running progress card and K
  pending asks from ``tool_call``. Prints the agent, and per user the session, card and ask ids.
- ``feishu-click --start T --file F --name N``: replay the callbacks ``F[N]`` (``{ask_id, body,
  headers}``, built by the test) through ``callbacks.feishu_handle``, callback i at T + i*slot.
  Prints each reply (ask id, HTTP status, body without the card).
- ``dingtalk-setup --agent NAME --base-url URL --respondents R... --early N``: a DingTalk bot on the
  fake server, a group session and two targeted collections from ``tool_call``: ``live`` (open)
  and ``due`` (its first N respondents already responded, then its deadline moved into the past).
- ``dingtalk-click --start T --app-id A --api-secret S --clicks JSON``: signed HTTP card callbacks
  through ``callbacks.dingtalk_handle``, click i (``{ask_id, user, form | cancel}``) at T + i*slot.
- ``sweep --start T``: one ``services.expire_due`` at T.

Every role also reports ``logged_errors``: records logged at ERROR or above (a surface hook that
failed after commit is logged, not raised).
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import sys
import time
from datetime import timedelta


class _ErrorLog(logging.Handler):
    """Keeps every record logged at ERROR or above, for the role's output."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}"[:500])


ERROR_LOG = _ErrorLog()


def _setup_django(real_surfaces: bool = False) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.conf import settings

    logging.getLogger().addHandler(ERROR_LOG)
    if not real_surfaces:
        settings.ASKCARDS_SURFACES = ["tests.surfaces.RecordingSurface"]


def _sleep_until(start: float) -> None:
    delay = start - time.time()
    if delay > 30:
        raise SystemExit(f"start time is {delay:.0f}s away; refusing to wait that long")
    if delay > 0:
        time.sleep(delay)


def setup(args) -> dict:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from askcards import services
    from askcards.models import Ask
    from tests.conftest import QUESTIONS
    from tests.surfaces import RecordingSurface

    get_user_model().objects.get_or_create(username="alice")
    agent, key = services.agent_create(name=args.agent, webhook_url=args.webhook_url, web_users=["alice"])
    services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
    session, _ = services.session_upsert(
        agent=agent, key=f"web/{args.agent}", platform="web", web_user="alice", user_id="alice"
    )
    RecordingSurface.present.add(session.id)
    ask_ids = []
    for index in range(args.asks):
        outcome = services.tool_call(
            agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS},
            call_id=f"call-{index}",
        )
        if outcome.status != "pending":
            raise SystemExit(f"ask {index} is {outcome.status}, expected pending")
        ask_ids.append(outcome.ask.id)
    if args.past:
        Ask.objects.filter(id__in=ask_ids).update(deadline=timezone.now() - timedelta(seconds=1))
    return {
        "agent_id": agent.id,
        "key": key,
        "webhook_secret": agent.webhook_secret,
        "session_id": session.id,
        "ask_ids": ask_ids,
    }


def act(args) -> dict:
    from askcards import services
    from askcards.models import Ask

    asks = {ask.id: ask for ask in Ask.objects.select_related("session", "agent").filter(id__in=args.ask_ids)}
    missing = set(args.ask_ids) - set(asks)
    if missing:
        raise SystemExit(f"unknown asks: {sorted(missing)}")
    answers = [{"question": asks[args.ask_ids[0]].questions[0]["question"], "selectedLabels": [],
                "customInput": args.label or f"{args.role}-{os.getpid()}"}]

    def attempt(ask) -> bool:
        if args.role == "answer":
            return services.ask_answer(ask_id=ask.id, answers=answers, surface=args.surface).accepted
        if args.role == "cancel":
            return services.ask_cancel(ask=ask, reason="by_agent", actor="agent:race")
        return services.ask_expire(ask=ask)

    won, lost, errors = [], [], {}
    jitter = random.Random(os.getpid())
    for index, ask_id in enumerate(args.ask_ids):
        # Every process tries ask i at start + i*slot (plus a little jitter, so that each role gets
        # to win some): a fresh race per ask instead of one process running ahead of the others.
        _sleep_until(args.start + index * args.slot + jitter.uniform(0, args.jitter))
        try:
            (won if attempt(asks[ask_id]) else lost).append(ask_id)
        except Exception as exc:  # reported, and turned into a test failure by the caller
            errors[ask_id] = repr(exc)
    return {"role": args.role, "surface": args.surface, "label": answers[0]["customInput"],
            "won": won, "lost": lost, "errors": errors}


def work(args) -> dict:
    from django.conf import settings

    from askcards import outbox
    from askcards.worker import Worker

    # Shrunk windows let a test reach "a batch outlasts its claim" in seconds instead of minutes.
    if args.claim_seconds is not None:
        outbox.CLAIM_SECONDS = args.claim_seconds
    if args.webhook_timeout is not None:
        settings.ASKCARDS_WEBHOOK_READ_TIMEOUT_SECONDS = args.webhook_timeout
    worker = Worker()
    _sleep_until(args.start)
    deadline = time.monotonic() + args.max_seconds
    steps = done = idle = 0
    errors = []
    while idle < args.idle_steps and time.monotonic() < deadline:
        steps += 1
        try:
            found = worker.step()
        except Exception as exc:
            errors.append(repr(exc))
            found = 0
        done += found
        idle = 0 if found else idle + 1
        if not found:
            time.sleep(0.2)
    return {"steps": steps, "done": done, "errors": errors, "timed_out": idle < args.idle_steps}


def _replay(args, entries: list, send) -> list:
    """Call ``send(entry)`` for entry i at T + i*slot (+ jitter); each reply, or the exception.
    A reply's ``late`` is how many seconds after its instant the call began (startup, contention)."""
    replies = []
    jitter = random.Random(os.getpid())
    for index, entry in enumerate(entries):
        instant = args.start + index * args.slot + jitter.uniform(0, args.jitter)
        _sleep_until(instant)
        late = round(max(0.0, time.time() - instant), 4)
        try:
            status, body = send(entry)
        except Exception as exc:  # reported, and turned into a test failure by the caller
            replies.append({"ask_id": entry["ask_id"], "error": repr(exc), "late": late})
            continue
        body = {key: value for key, value in body.items() if key != "card"}  # the toast, not the render
        replies.append({"ask_id": entry["ask_id"], "status": status, "body": body, "late": late})
    return replies


def feishu_setup(args) -> dict:
    from askcards import services
    from tests.conftest import QUESTIONS
    from tests.feishu.integration import ENCRYPT_KEY, VERIFICATION_TOKEN

    # Nothing listens there: no worker runs, and callbacks never call Feishu.
    bot = services.bot_add(
        platform="feishu", app_id=args.app_id, app_secret="secret", base_url="http://127.0.0.1:9",
        encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN,
    )
    agent, _ = services.agent_create(name=args.agent, bots=[bot])
    services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
    sessions = {}
    for spec in args.session:
        user, count = spec.split("=")
        session, _ = services.session_upsert(agent=agent, key=f"feishu-{args.app_id}-private-{user}", bot=bot)
        card = services.progress_put(session=session, status="running", title="race")
        ask_ids = []
        for index in range(int(count)):
            outcome = services.tool_call(
                agent=agent, session=session, name="ask_user_questions", arguments={"questions": QUESTIONS},
                call_id=f"{user}-{index}",
            )
            if outcome.status != "pending" or "feishu" not in outcome.ask.surfaces:
                raise SystemExit(f"ask {index} of {user} is {outcome.status} on {outcome.ask.surfaces}")
            ask_ids.append(outcome.ask.id)
        sessions[user] = {"session_id": session.id, "card_id": card.id, "ask_ids": ask_ids}
    return {"agent_id": agent.id, "app_id": bot.app_id, "sessions": sessions}


def feishu_click(args) -> dict:
    from askcards import callbacks

    with open(args.file) as handle:
        entries = json.load(handle)[args.name]

    def send(entry):
        return callbacks.feishu_handle(args.app_id, entry["headers"], entry["body"].encode())

    return {"name": args.name, "replies": _replay(args, entries, send)}


def dingtalk_setup(args) -> dict:
    from django.utils import timezone

    from askcards import services
    from askcards.models import Ask
    from tests.dingtalk.integration import API_SECRET, FIELDS, TOOL

    bot = services.bot_add(
        platform="dingtalk", app_id=args.app_id, app_secret=args.app_secret, base_url=args.base_url,
        api_secret=API_SECRET, callback_mode="stream",
    )
    agent, _ = services.agent_create(name=args.agent, bots=[bot])
    services.agent_quotas_set(agent=agent, actor="test", **{quota: 0 for quota in services.QUOTAS})
    session, _ = services.session_upsert(
        agent=agent, key="dingtalk/group/race", platform="dingtalk", bot=bot, chat_type="group",
        user_id="initiator", chat_id="cid_race", user_name="发起人",
    )
    asks = {}
    for name in ("live", "due"):
        arguments = {"fields": FIELDS, "title": f"午餐-{name}", "timeoutMinutes": 30,
                     "target": {"type": "group", "id": "cid_race", "respondentUserIds": args.respondents}}
        outcome = services.tool_call(agent=agent, session=session, name=TOOL, arguments=arguments, call_id=name)
        if outcome.status != "pending":
            raise SystemExit(f"collection {name} is {outcome.status}: {outcome.tool_result}")
        asks[name] = outcome.ask
    due = asks["due"]
    for user in args.respondents[: args.early]:
        click = services.dingtalk_click(ask=due, user_id=user, action="submit", form={"note": f"early-{user}"})
        if click.kind is not services.ClickKind.RECORDED:
            raise SystemExit(f"early response of {user} was {click.kind}")
    Ask.objects.filter(pk=due.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    return {"agent_id": agent.id, "app_id": bot.app_id, "api_secret": API_SECRET,
            "asks": {name: ask.id for name, ask in asks.items()}}


def dingtalk_click(args) -> dict:
    from askcards import callbacks
    from askcards.models import CardMessage
    from tests.fakes.dingtalk import signed_callback

    clicks = json.loads(args.clicks)
    tracks = dict(CardMessage.objects.filter(ask_id__in={c["ask_id"] for c in clicks}).values_list("ask_id", "message_id"))

    # Each signature pair is accepted once, and these processes sign at the same instants: a
    # timestamp of this process's own (its pid's second before the start, one ms per click).
    stamps = itertools.count(int(args.start * 1000) - (os.getpid() % 100) * 1000)

    def send(click):
        headers, body = signed_callback(
            args.api_secret, timestamp_ms=next(stamps), out_track_id=tracks[click["ask_id"]], user_id=click["user"],
            question_id=click["ask_id"], form=click.get("form"), cancel=click.get("cancel", False),
        )
        return callbacks.dingtalk_handle(args.app_id, headers, body)

    replies = _replay(args, clicks, send)
    for click, reply in zip(clicks, replies):
        reply["user"] = click["user"]
    return {"replies": replies}


def sweep(args) -> dict:
    from askcards import services

    _sleep_until(args.start)
    late = round(max(0.0, time.time() - args.start), 4)
    try:
        return {"expired": services.expire_due(), "errors": [], "late": late}
    except Exception as exc:
        return {"expired": 0, "errors": [repr(exc)], "late": late}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="race_actor")
    sub = parser.add_subparsers(dest="command", required=True)
    p_setup = sub.add_parser("setup")
    p_setup.add_argument("--agent", required=True)
    p_setup.add_argument("--asks", type=int, required=True)
    p_setup.add_argument("--past", action="store_true")
    p_setup.add_argument("--webhook-url", default="")
    p_act = sub.add_parser("act")
    p_act.add_argument("--start", type=float, default=0.0)
    p_act.add_argument("--surface", default="web")
    p_act.add_argument("--label", default="")
    p_act.add_argument("--slot", type=float, default=0.05)
    p_act.add_argument("--jitter", type=float, default=0.004)
    p_act.add_argument("--real-surfaces", action="store_true", help="keep the project's surfaces (Feishu, DingTalk)")
    p_act.add_argument("role", choices=["answer", "cancel", "expire"])
    p_act.add_argument("ask_ids", nargs="+")
    p_work = sub.add_parser("work")
    p_work.add_argument("--start", type=float, default=0.0)
    p_work.add_argument("--max-seconds", type=float, default=15.0)
    p_work.add_argument("--idle-steps", type=int, default=4)
    p_work.add_argument("--claim-seconds", type=float, default=None, help="patch outbox.CLAIM_SECONDS")
    p_work.add_argument("--webhook-timeout", type=float, default=None, help="patch the webhook timeout setting")
    p_fsetup = sub.add_parser("feishu-setup")
    p_fsetup.add_argument("--agent", required=True)
    p_fsetup.add_argument("--app-id", required=True)
    p_fsetup.add_argument("--session", action="append", required=True, help="USER=ASKS, once per session")
    p_fclick = sub.add_parser("feishu-click")
    p_fclick.add_argument("--app-id", required=True)
    p_fclick.add_argument("--file", required=True)
    p_fclick.add_argument("--name", required=True)
    p_dsetup = sub.add_parser("dingtalk-setup")
    p_dsetup.add_argument("--agent", required=True)
    p_dsetup.add_argument("--app-id", required=True)
    p_dsetup.add_argument("--app-secret", required=True)
    p_dsetup.add_argument("--base-url", required=True)
    p_dsetup.add_argument("--respondents", nargs="+", required=True)
    p_dsetup.add_argument("--early", type=int, default=0)
    p_dclick = sub.add_parser("dingtalk-click")
    p_dclick.add_argument("--app-id", required=True)
    p_dclick.add_argument("--api-secret", required=True)
    p_dclick.add_argument("--clicks", required=True, help="JSON list of {ask_id, user, form | cancel}")
    for replaying in (p_fclick, p_dclick):
        replaying.add_argument("--start", type=float, default=0.0)
        replaying.add_argument("--slot", type=float, default=0.05)
        replaying.add_argument("--jitter", type=float, default=0.004)
    p_sweep = sub.add_parser("sweep")
    p_sweep.add_argument("--start", type=float, default=0.0)
    args = parser.parse_args(argv)

    roles = {
        "setup": setup, "act": act, "work": work, "feishu-setup": feishu_setup, "feishu-click": feishu_click,
        "dingtalk-setup": dingtalk_setup, "dingtalk-click": dingtalk_click, "sweep": sweep,
    }
    _setup_django(real_surfaces=args.command not in ("setup", "act", "work") or getattr(args, "real_surfaces", False))
    result = roles[args.command](args)
    result["logged_errors"] = ERROR_LOG.messages
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
