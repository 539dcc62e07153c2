"""Fill a migrated PostgreSQL askcards database at the size of issue 14, fast: the one seeder of
the benchmarks (``bench_scale``) and of the tests at size (``tests/largedb.py``).

    .venv/bin/python -m tests.bench.seed postgresql://postgres@127.0.0.1:5432/DBNAME \\
        [--closed 1000000] [--pending 100000] [--sessions 10000] [--agents 10] [--days 120] \\
        [--agent NAME] [--bot-app-id APP_ID]

Everything is written by ``INSERT … SELECT … generate_series`` in one transaction (no Python
loop per row), then ``ANALYZE`` (the full size: 1.1 M asks, 1.1 M respondents, 3.2 M audit
rows, 1 M outbox events). API for other scripts and tests:

- ``seed(conn, size=Size(...), *, agent=None, bot_app_id=None, now=None, progress=None) ->
  dict[str, int]``: ``conn`` is a psycopg connection to the database (migrated; no rows seeded
  before); returns the row count written per table. ``agent``: the name of an existing agent that
  gets every session and ask (its event counter goes on from where it is; ``size.agents`` is then
  unused), else ``size.agents`` new agents share them round robin. ``bot_app_id``: an existing
  Feishu bot whose chats the Feishu sessions are, each with a running progress card and its card
  message (in sync); without one they have no bot and no cards. ``progress``: called with a line
  per table written.
- ``Size``: ``closed`` asks spread over the last ``days`` days up to an hour ago (oldest first),
  ``pending`` asks created in the last hour spread over every session (deadlines a day or more
  away), ``sessions`` sessions (feishu 80 %, web 14 %, dingtalk 5 %, wechat 1 %; a fifth group
  chats; a tenth of them with web_user alice). An ask's platform is its session's; its tool the
  DingTalk form for a fifth of the DingTalk asks (1 % of all), else ask_user_questions. Closed
  asks end in every status · reason with a realistic mix (``MIX``; most answered, a few in 0.05 %
  buckets: ``RARE`` names one value per filter that is rare on purpose). Results are delivered 5
  minutes after the ask, answers purged once past the 7 days of retention (≈ 6 % of the asks
  closed over 120 days still hold theirs). Each ask has one respondent (the session's user);
  each closed ask 3 audit rows (created, activated, closed; every 50th one more, "ignored") and
  one outbox event (``ask.closed``; 1 in 4,096 ``session.cancel_requested``), delivered (webhook,
  every 10th by feed) a second after it closed, every 100th given up instead; each pending ask
  2 audit rows.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

# Per 10,000 closed asks: how many end in each status · reason.
MIX = [
    ("answered", "submitted", 7100), ("answered", "empty", 200), ("answered", "completed", 300),
    ("cancelled", "by_agent", 500), ("cancelled", "by_respondent", 200), ("cancelled", "by_operator", 20),
    ("cancelled", "session_cancelled", 50), ("cancelled", "pause_failed", 10),
    ("expired", "timeout", 1200),
    ("invalidated", "superseded_by_question", 200), ("invalidated", "superseded_by_message", 100),
    ("invalidated", "restart", 50),
    ("failed", "delivery_failed", 50), ("failed", "no_surface", 15), ("failed", "not_available", 5),
]
assert sum(share for *_, share in MIX) == 10_000
# Closed ask i falls in the MIX bucket (i · SPREAD) mod 10,000: SPREAD is prime to 10,000, so
# any 10,000 consecutive asks hold the mix exactly and a few hundred already hold most of it.
SPREAD = 7919
# A rare value of each filter in the seeded data (the EXPLAIN tests filter on these).
RARE = {"status": "failed", "reason": "not_available", "tool": "dingtalk_ask_user_question", "platform": "wechat",
        "kind": "ignored", "type": "session.cancel_requested", "chat_type": "group"}

# What the seeded asks ask and, answered within retention, what they hold.
QUESTIONS = [
    {"question": "Which database should the service use in production?", "header": "Database", "multiSelect": False,
     "options": [{"label": "PostgreSQL", "description": "Relational"}, {"label": "SQLite", "description": "Embedded"}]},
    {"question": "Which caches should sit in front of it?", "header": "Cache", "multiSelect": True,
     "options": [{"label": "Redis", "description": ""}, {"label": "Local memory", "description": ""}]},
]
RESULT = {
    "answers": [{"question": QUESTIONS[0]["question"], "header": "Database", "selected": ["PostgreSQL"]},
                {"question": QUESTIONS[1]["question"], "header": "Cache", "selected": ["Redis", "Local memory"]}],
    "tool_result": {"content": [{"type": "text", "text": "User has answered your questions: "
                                 "\"Which database should the service use in production?\"=\"PostgreSQL\", "
                                 "\"Which caches should sit in front of it?\"=\"Redis, Local memory\"."}]},
}
ANSWERS = {"0": {"selected": [0]}, "1": {"selected": [0, 1]}}
ENDED = {"tool_result": {"content": [{"type": "text", "text": "The question ended without an answer."}]}}
STATEMENT_TIMEOUT = "1800s"  # any one seeding statement


@dataclass(frozen=True)
class Size:
    closed: int = 1_000_000
    pending: int = 100_000
    sessions: int = 10_000
    agents: int = 10
    days: int = 120


def status_counts(closed: int) -> Counter[str]:
    """How many of ``closed`` seeded closed asks end in each status (for checks of the seeding)."""
    buckets = [(low, low + share, status) for low, (status, _, share) in zip(_lows(), MIX)]
    counts: Counter[str] = Counter()
    for i in range(1, closed + 1):
        bucket = i * SPREAD % 10_000
        counts[next(status for low, high, status in buckets if low <= bucket < high)] += 1
    return counts


def _lows() -> list[int]:
    lows, low = [], 0
    for *_, share in MIX:
        lows.append(low)
        low += share
    return lows


def _mix_values() -> str:
    return ", ".join(f"({low}, {low + share}, '{status}', '{reason}')"
                     for low, (status, reason, share) in zip(_lows(), MIX))


def seed(conn, size: Size = Size(), *, agent: str | None = None, bot_app_id: str | None = None,
         now: datetime | None = None, progress: Callable[[str], None] | None = None) -> dict[str, int]:
    now = now or datetime.now(timezone.utc)
    names = [agent] if agent else [f"seed-agent-{n}" for n in range(1, size.agents + 1)]
    p = {"now": now, "sessions": size.sessions, "closed": size.closed, "pending": size.pending,
         "span": size.days * 86400, "names": names, "agents": len(names), "bot_app_id": bot_app_id or "",
         "questions": json.dumps(QUESTIONS), "result": json.dumps(RESULT), "answers": json.dumps(ANSWERS),
         "ended": json.dumps(ENDED), "spread": SPREAD}
    counts: dict[str, int] = {}
    with conn.transaction():
        cur = conn.cursor()
        cur.execute(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'")

        def run(table: str, sql: str) -> None:
            started = time.monotonic()
            cur.execute(sql, p)
            counts[table] = counts.get(table, 0) + max(cur.rowcount, 0)
            if progress:
                progress(f"seeded {table}: {cur.rowcount:,} rows in {time.monotonic() - started:.1f} s")

        if not agent:
            run("agent", """
                INSERT INTO askcards_agent (name, key_hash, key_hint, webhook_url, webhook_secret, is_active, event_seq,
                                            created_at)
                SELECT name, md5('key' || name) || md5('hash' || name), 'ak_seed', 'https://agent.example/hook', '',
                       true, 0, %(now)s - make_interval(days => 400)
                FROM unnest(%(names)s::text[]) name""")
        elif cur.execute("SELECT count(*) FROM askcards_agent WHERE name = (%(names)s::text[])[1]",
                         p).fetchone()[0] != 1:
            raise ValueError(f"no agent {agent!r} to seed for")
        bots = "SELECT count(*) FROM askcards_bot WHERE platform = 'feishu' AND app_id = %(bot_app_id)s"
        if bot_app_id and cur.execute(bots, p).fetchone()[0] != 1:
            raise ValueError(f"no Feishu bot {bot_app_id!r} to seed chats of")
        agents_cte = """agents AS (SELECT id, array_position(%(names)s::text[], name::text) - 1 AS n
                                   FROM askcards_agent WHERE name = ANY(%(names)s::text[]))"""
        # Session j belongs to the agents round robin; its platform follows j % 100.
        run("session", f"""
            WITH {agents_cte}, bot AS (SELECT id FROM askcards_bot WHERE platform = 'feishu' AND app_id = %(bot_app_id)s),
            s AS (SELECT j, CASE WHEN j %% 100 < 80 THEN 'feishu' WHEN j %% 100 < 94 THEN 'web'
                                 WHEN j %% 100 < 99 THEN 'dingtalk' ELSE 'wechat' END AS platform
                  FROM generate_series(0, %(sessions)s - 1) j)
            INSERT INTO askcards_session (id, key, platform, chat_type, chat_id, user_id, user_name, web_user,
                                          created_at, updated_at, agent_id, bot_id, parent_id)
            SELECT 's_' || md5('s' || j), 'seed/' || j, s.platform,
                   CASE WHEN j %% 5 = 0 THEN 'group' ELSE 'p2p' END, '',
                   CASE WHEN s.platform = 'feishu' THEN 'ou_seed_' ELSE 'user' END || j, '',
                   CASE WHEN j %% 10 = 0 THEN 'alice' ELSE '' END,
                   %(now)s - make_interval(secs => %(span)s * (1 - j::float8 / %(sessions)s)) - interval '2 days',
                   %(now)s, agents.id, CASE WHEN s.platform = 'feishu' THEN (SELECT id FROM bot) END, NULL
            FROM s JOIN agents ON agents.n = j %% %(agents)s""")
        if bot_app_id:
            # The seeding agents use the bot as an operator would have granted it.
            run("bot grant", f"""
                WITH {agents_cte}
                INSERT INTO askcards_agent_bots (agent_id, bot_id)
                SELECT agents.id, (SELECT id FROM askcards_bot WHERE platform = 'feishu' AND app_id = %(bot_app_id)s)
                FROM agents ON CONFLICT DO NOTHING""")
            run("progress card + card message", """
                WITH cards AS (
                    INSERT INTO askcards_progresscard (session_id, status, title, content, detail_url, sender_id,
                                                       reply_to, cancel_requested_at, created_at, updated_at)
                    SELECT id, 'running', 'Seeded task ' || key, 'Working on the task: **step 2 of 5**.', '',
                           user_id, '', NULL, %(now)s - interval '3 hours', %(now)s
                    FROM askcards_session WHERE key LIKE 'seed/%%' AND bot_id IS NOT NULL
                    RETURNING id, created_at)
                INSERT INTO askcards_cardmessage (platform, bot_id, ask_id, progress_card_id, message_id, open_space_id,
                                                  pushed, version, synced_version, next_sync_at, sync_attempts,
                                                  last_error, card_reason, created_at, updated_at)
                SELECT 'feishu', (SELECT id FROM askcards_bot WHERE platform = 'feishu' AND app_id = %(bot_app_id)s),
                       NULL, id, 'om_seed_' || id, '', NULL, 12, 12, NULL, 0, '', '', created_at, %(now)s
                FROM cards""")
        session_cte = """sessions AS (SELECT id, agent_id, platform, user_id,
                                             row_number() OVER (ORDER BY created_at, id) - 1 AS n
                                      FROM askcards_session WHERE key LIKE 'seed/%%')"""
        columns = """(id, tool, call_id, sender_id, blocking, title, description, questions, fields, target_type,
                      target_id, scope_key, surfaces, status, reason, deadline, result, created_at, activated_at,
                      closed_at, result_delivered_at, answers_purged_at, agent_id, session_id, platform, closed_on)"""
        tool = """CASE WHEN s.platform = 'dingtalk' AND i %% 5 = 0 THEN 'dingtalk_ask_user_question'
                       ELSE 'ask_user_questions' END"""
        # Closed ask i was created span·(1 - i/closed) seconds before the last hour, closed 5
        # minutes later, its result delivered a second after that; its answers purged once 7 days
        # past that (an hour early at most, so that none is due when the seeding ends).
        run("ask", f"""
            WITH {session_cte}, mix(low, high, status, reason) AS (VALUES {_mix_values()}),
            asks AS (SELECT i, %(now)s - interval '1 hour'
                               - make_interval(secs => %(span)s * (1 - i::float8 / %(closed)s)) AS created_at
                     FROM generate_series(1, %(closed)s) i),
            rows AS (SELECT asks.*, asks.created_at + interval '5 minutes 1 second' AS delivered_at FROM asks)
            INSERT INTO askcards_ask {columns}
            SELECT 'q_' || md5('q' || i), {tool}, NULL, s.user_id, true, 'Seeded question ' || i, '',
                   %(questions)s::jsonb, NULL, 'none', '', '', jsonb_build_array(s.platform),
                   mix.status, mix.reason, rows.created_at + interval '1 day',
                   CASE WHEN rows.delivered_at + interval '7 days' <= %(now)s + interval '1 hour'
                        THEN '{{"purged": true}}'::jsonb
                        WHEN mix.status = 'answered' THEN %(result)s::jsonb ELSE %(ended)s::jsonb END,
                   rows.created_at, rows.created_at + interval '1 second', rows.created_at + interval '5 minutes',
                   rows.delivered_at,
                   CASE WHEN rows.delivered_at + interval '7 days' <= %(now)s + interval '1 hour'
                        THEN least(rows.delivered_at + interval '7 days', %(now)s) END,
                   s.agent_id, s.id, s.platform, CASE WHEN mix.status = 'answered' THEN s.platform ELSE '' END
            FROM rows JOIN sessions s ON s.n = rows.i %% %(sessions)s
                      JOIN mix ON rows.i::bigint * %(spread)s %% 10000 >= mix.low
                                  AND rows.i::bigint * %(spread)s %% 10000 < mix.high
            ORDER BY rows.i""")
        run("ask", f"""
            WITH {session_cte}
            INSERT INTO askcards_ask {columns}
            SELECT 'q_' || md5('p' || i), {tool}, NULL, s.user_id, true, 'Waiting question ' || i, '',
                   %(questions)s::jsonb, NULL, 'none', '', '', jsonb_build_array(s.platform), 'pending', '',
                   %(now)s + interval '1 day' + (i %% 1000) * interval '1 minute', NULL,
                   %(now)s - make_interval(secs => 3600 * (1 - i::float8 / %(pending)s)),
                   %(now)s - make_interval(secs => 3600 * (1 - i::float8 / %(pending)s)),
                   NULL, NULL, NULL, s.agent_id, s.id, s.platform, ''
            FROM generate_series(1, %(pending)s) i JOIN sessions s ON s.n = i %% %(sessions)s
            ORDER BY i""")
        run("respondent", """
            INSERT INTO askcards_respondent (respondent_id, respondent_key, position, status, answers, answered_at,
                                             surface, ask_id)
            SELECT a.sender_id, lower(a.sender_id), 0,
                   CASE a.status WHEN 'pending' THEN 'pending' WHEN 'answered' THEN 'submitted'
                                 WHEN 'expired' THEN 'missing' ELSE 'cancelled' END,
                   CASE WHEN a.status = 'answered' AND a.answers_purged_at IS NULL THEN %(answers)s::jsonb END,
                   CASE WHEN a.status = 'answered' THEN a.closed_at END,
                   CASE WHEN a.status = 'answered' THEN a.platform ELSE '' END, a.id
            FROM askcards_ask a WHERE a.title LIKE 'Seeded question %%' OR a.title LIKE 'Waiting question %%'
            ORDER BY a.created_at""")
        # Audit rows in time order (ids grow with time, as in service).
        run("askevent", """
            INSERT INTO askcards_askevent (kind, from_status, to_status, actor, surface, detail, created_at, ask_id)
            SELECT e.kind, e.from_status, e.to_status, e.actor, e.surface, '{}'::jsonb, e.at, a.id
            FROM askcards_ask a
            CROSS JOIN LATERAL (VALUES
                (1, 'created', '', 'reserved', 'agent:seed', '', a.created_at),
                (2, 'activated', 'reserved', 'pending', 'system', '', a.activated_at),
                (3, 'closed', 'pending', a.status,
                 CASE WHEN a.status = 'answered' THEN 'respondent:' || a.sender_id ELSE 'system' END,
                 CASE WHEN a.status = 'answered' THEN a.platform ELSE '' END, a.closed_at),
                (4, 'ignored', a.status, a.status, 'respondent:late', a.platform, a.closed_at + interval '1 minute')
            ) AS e(step, kind, from_status, to_status, actor, surface, at)
            WHERE (a.title LIKE 'Seeded question %%' AND (e.step < 4 OR right(a.title, 2) = '50'))
               OR (a.title LIKE 'Waiting question %%' AND e.step < 3)
            ORDER BY e.at, a.id, e.step""")
        # Numbered on from each agent's counter, in the order the asks closed.
        run("outboxevent", """
            INSERT INTO askcards_outboxevent (seq, type, data, created_at, attempts, next_attempt_at, claimed_until,
                                              delivered_at, delivered_via, failed_at, last_error, agent_id, ask_id,
                                              session_id)
            SELECT ag.event_seq + row_number() OVER (PARTITION BY a.agent_id ORDER BY a.closed_at, a.id),
                   CASE WHEN right(a.id, 3) = '000' THEN 'session.cancel_requested' ELSE 'ask.closed' END,
                   jsonb_build_object('status', a.status, 'reason', a.reason), a.closed_at, 1, a.closed_at,
                   NULL,
                   CASE WHEN right(a.title, 2) = '00' THEN NULL ELSE a.closed_at + interval '1 second' END,
                   CASE WHEN right(a.title, 2) = '00' THEN '' WHEN right(a.title, 1) = '0' THEN 'feed' ELSE 'webhook' END,
                   CASE WHEN right(a.title, 2) = '00' THEN a.closed_at + interval '1 day' END,
                   CASE WHEN right(a.title, 2) = '00' THEN 'HTTP 500' ELSE '' END,
                   a.agent_id, a.id, a.session_id
            FROM askcards_ask a JOIN askcards_agent ag ON ag.id = a.agent_id
            WHERE a.title LIKE 'Seeded question %%'
            ORDER BY a.closed_at, a.id""")
        cur.execute("""UPDATE askcards_agent SET event_seq = e.seq
                       FROM (SELECT agent_id, max(seq) AS seq FROM askcards_outboxevent GROUP BY agent_id) e
                       WHERE e.agent_id = askcards_agent.id AND askcards_agent.name = ANY(%(names)s::text[])""", p)
    conn.execute("ANALYZE")
    return counts


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dsn")
    for name, default in vars(Size()).items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--agent", default=None, help="an existing agent's name: every row is its")
    parser.add_argument("--bot-app-id", default=None, help="an existing Feishu bot: the Feishu sessions are its chats")
    args = parser.parse_args()
    size = Size(**{name: getattr(args, name) for name in vars(Size())})
    started = time.perf_counter()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        counts = seed(conn, size, agent=args.agent, bot_app_id=args.bot_app_id, progress=print)
    print(f"seeded in {time.perf_counter() - started:.1f} s:", counts)


if __name__ == "__main__":
    main()
