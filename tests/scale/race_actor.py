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
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import timedelta


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.conf import settings

    settings.ASKCARDS_SURFACES = ["tests.surfaces.RecordingSurface"]


def _sleep_until(start: float) -> None:
    delay = start - time.time()
    if delay > 30:
        raise SystemExit(f"start time is {delay:.0f}s away; refusing to wait that long")
    if delay > 0:
        time.sleep(delay)


def setup(args) -> dict:
    from django.utils import timezone

    from askcards import services
    from askcards.models import Ask
    from tests.conftest import QUESTIONS
    from tests.surfaces import RecordingSurface

    agent, key = services.agent_create(name=args.agent, webhook_url=args.webhook_url)
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
        settings.ASKCARDS_WEBHOOK_TIMEOUT_SECONDS = args.webhook_timeout
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
    p_act.add_argument("role", choices=["answer", "cancel", "expire"])
    p_act.add_argument("ask_ids", nargs="+")
    p_work = sub.add_parser("work")
    p_work.add_argument("--start", type=float, default=0.0)
    p_work.add_argument("--max-seconds", type=float, default=15.0)
    p_work.add_argument("--idle-steps", type=int, default=4)
    p_work.add_argument("--claim-seconds", type=float, default=None, help="patch outbox.CLAIM_SECONDS")
    p_work.add_argument("--webhook-timeout", type=float, default=None, help="patch the webhook timeout setting")
    args = parser.parse_args(argv)

    _setup_django()
    result = {"setup": setup, "act": act, "work": work}[args.command](args)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
