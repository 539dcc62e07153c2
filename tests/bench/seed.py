"""Fill a migrated, empty PostgreSQL askcards database at the size of issue 14, fast.

    .venv/bin/python -m tests.bench.seed postgresql://postgres@127.0.0.1:5432/DBNAME \\
        [--closed 1000000] [--pending 100000] [--sessions 10000] [--agents 10] [--days 120]

Everything is written by ``INSERT … SELECT … generate_series`` in one transaction (no Python
loop per row), then ``ANALYZE``: on this machine the full size (1.1 M asks, 1.1 M respondents,
3.3 M audit rows, 1 M outbox events) takes a few minutes. API for other scripts and tests:

- ``seed(conn, size=Size(...), now=None) -> dict[str, int]``: ``conn`` is a psycopg connection to
  the database (migrated, no askcards rows yet); returns the row count written per table.
- ``Size``: ``closed`` asks spread over the last ``days`` days (oldest first, ids in time order),
  ``pending`` asks created in the last hour spread over every session, ``sessions`` sessions
  (feishu 80 %, web 14 %, dingtalk 5 %, wechat 1 %; a tenth with web_user alice) of ``agents``
  agents; an ask's platform is its session's, its tool the DingTalk form for a fifth of the
  DingTalk asks (1 % of all), else ask_user_questions. Closed asks end in every status · reason with a realistic mix (most answered, a few in
  0.05 % buckets: ``RARE`` names one value per filter that is rare on purpose). Each ask has one
  respondent; each closed ask 3 audit rows (created, activated, closed; every 50th one more,
  "ignored") and one ``ask.closed`` outbox event, delivered (webhook, every 10th by feed) a second
  after it closed, every 100th given up instead; each pending ask 2 audit rows.
"""
from __future__ import annotations

import argparse
import time
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
# A rare value of each filter in the seeded data (the EXPLAIN test filters on these).
RARE = {"status": "failed", "reason": "not_available", "tool": "dingtalk_ask_user_question", "platform": "wechat",
        "kind": "ignored", "type": "session.cancel_requested", "chat_type": "group"}


@dataclass(frozen=True)
class Size:
    closed: int = 1_000_000
    pending: int = 100_000
    sessions: int = 10_000
    agents: int = 10
    days: int = 120


def _mix_values() -> str:
    rows, low = [], 0
    for status, reason, share in MIX:
        rows.append(f"({low}, {low + share}, '{status}', '{reason}')")
        low += share
    return ", ".join(rows)


def seed(conn, size: Size = Size(), now: datetime | None = None) -> dict[str, int]:
    now = now or datetime.now(timezone.utc)
    span = size.days * 86400
    p = {"now": now, "agents": size.agents, "sessions": size.sessions, "closed": size.closed,
         "pending": size.pending, "span": span}
    counts: dict[str, int] = {}
    with conn.transaction():
        cur = conn.cursor()

        def run(table: str, sql: str) -> None:
            cur.execute(sql, p)
            counts[table] = counts.get(table, 0) + cur.rowcount

        run("agent", """
            INSERT INTO askcards_agent (name, key_hash, key_hint, webhook_url, webhook_secret, is_active, event_seq, created_at)
            SELECT 'seed-agent-' || a, md5('key' || a) || md5('hash' || a), 'ak_seed', 'https://agent.example/hook', '',
                   true, 0, %(now)s - make_interval(days => 400)
            FROM generate_series(1, %(agents)s) a""")
        # Session j belongs to the j-th agent round robin; its platform follows j % 100.
        run("session", """
            WITH agents AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM askcards_agent
                            WHERE name LIKE 'seed-agent-%%')
            INSERT INTO askcards_session (id, key, platform, chat_type, chat_id, user_id, user_name, web_user,
                                          created_at, updated_at, agent_id, bot_id, parent_id)
            SELECT 's_' || md5('s' || j), 'seed/' || j,
                   CASE WHEN j %% 100 < 80 THEN 'feishu' WHEN j %% 100 < 94 THEN 'web'
                        WHEN j %% 100 < 99 THEN 'dingtalk' ELSE 'wechat' END,
                   CASE WHEN j %% 5 = 0 THEN 'group' ELSE 'p2p' END, '', 'user' || j, '',
                   CASE WHEN j %% 10 = 0 THEN 'alice' ELSE '' END,
                   %(now)s - make_interval(secs => %(span)s * (1 - j::float8 / %(sessions)s)) - interval '2 days',
                   %(now)s, agents.id, NULL, NULL
            FROM generate_series(0, %(sessions)s - 1) j JOIN agents ON agents.n = j %% %(agents)s""")
        session_cte = """sessions AS (SELECT id, agent_id, platform, row_number() OVER (ORDER BY created_at, id) - 1 AS n
                                      FROM askcards_session WHERE key LIKE 'seed/%%')"""
        # Closed asks, oldest first: ask i was created span·(1 - i/closed) seconds before the
        # last hour, closed 5 minutes later, its result delivered a second after that.
        run("ask", f"""
            WITH {session_cte}, mix(low, high, status, reason) AS (VALUES {_mix_values()}),
            asks AS (SELECT i, %(now)s - interval '1 hour'
                               - make_interval(secs => %(span)s * (1 - i::float8 / %(closed)s)) AS created_at
                     FROM generate_series(1, %(closed)s) i)
            INSERT INTO askcards_ask (id, tool, call_id, sender_id, blocking, title, description, questions, fields,
                                      target_type, target_id, scope_key, surfaces, status, reason, deadline, result,
                                      created_at, activated_at, closed_at, result_delivered_at, answers_purged_at,
                                      agent_id, session_id, platform)
            SELECT 'q_' || md5('q' || i),
                   CASE WHEN s.platform = 'dingtalk' AND i %% 5 = 0 THEN 'dingtalk_ask_user_question'
                        ELSE 'ask_user_questions' END,
                   NULL, '', true, 'Seeded question ' || i, '', '[]'::jsonb, NULL, 'none', '', '', '[]'::jsonb,
                   mix.status, mix.reason, asks.created_at + interval '1 day', '{{"purged": true}}'::jsonb,
                   asks.created_at, asks.created_at, asks.created_at + interval '5 minutes',
                   asks.created_at + interval '5 minutes 1 second',
                   CASE WHEN asks.created_at < %(now)s - interval '7 days' THEN asks.created_at + interval '7 days' END,
                   s.agent_id, s.id, s.platform
            FROM asks JOIN sessions s ON s.n = asks.i %% %(sessions)s
                      JOIN mix ON asks.i %% 10000 >= mix.low AND asks.i %% 10000 < mix.high
            ORDER BY asks.i""")
        run("ask", f"""
            WITH {session_cte}
            INSERT INTO askcards_ask (id, tool, call_id, sender_id, blocking, title, description, questions, fields,
                                      target_type, target_id, scope_key, surfaces, status, reason, deadline, result,
                                      created_at, activated_at, closed_at, result_delivered_at, answers_purged_at,
                                      agent_id, session_id, platform)
            SELECT 'q_' || md5('p' || i),
                   CASE WHEN s.platform = 'dingtalk' AND i %% 5 = 0 THEN 'dingtalk_ask_user_question'
                        ELSE 'ask_user_questions' END,
                   NULL, '', true, 'Waiting question ' || i, '', '[]'::jsonb, NULL, 'none', '', '', '[]'::jsonb,
                   'pending', '', %(now)s + interval '1 day', NULL,
                   %(now)s - make_interval(secs => 3600 * (1 - i::float8 / %(pending)s)),
                   %(now)s - make_interval(secs => 3600 * (1 - i::float8 / %(pending)s)), NULL, NULL, NULL,
                   s.agent_id, s.id, s.platform
            FROM generate_series(1, %(pending)s) i JOIN sessions s ON s.n = i %% %(sessions)s
            ORDER BY i""")
        run("respondent", """
            INSERT INTO askcards_respondent (respondent_id, respondent_key, position, status, answers, answered_at,
                                             surface, ask_id)
            SELECT 'user' || right(a.session_id, 6), 'user' || right(a.session_id, 6), 0,
                   CASE a.status WHEN 'pending' THEN 'pending' WHEN 'answered' THEN 'submitted' ELSE 'cancelled' END,
                   NULL, a.closed_at, CASE WHEN a.status = 'answered' THEN 'web' ELSE '' END, a.id
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
                (3, 'closed', 'pending', a.status, 'system', 'web', a.closed_at),
                (4, 'ignored', a.status, a.status, 'respondent:late', 'web', a.closed_at + interval '1 minute')
            ) AS e(step, kind, from_status, to_status, actor, surface, at)
            WHERE (a.title LIKE 'Seeded question %%' AND (e.step < 4 OR right(a.title, 2) = '50'))
               OR (a.title LIKE 'Waiting question %%' AND e.step < 3)
            ORDER BY e.at, a.id, e.step""")
        run("outboxevent", """
            INSERT INTO askcards_outboxevent (seq, type, data, created_at, attempts, next_attempt_at, claimed_until,
                                              delivered_at, delivered_via, failed_at, last_error, agent_id, ask_id,
                                              session_id)
            SELECT row_number() OVER (PARTITION BY a.agent_id ORDER BY a.closed_at, a.id),
                   CASE WHEN right(a.id, 3) = '000' THEN 'session.cancel_requested' ELSE 'ask.closed' END,
                   '{}'::jsonb, a.closed_at, 1, a.closed_at,
                   NULL,
                   CASE WHEN right(a.title, 2) = '00' THEN NULL ELSE a.closed_at + interval '1 second' END,
                   CASE WHEN right(a.title, 2) = '00' THEN '' WHEN right(a.title, 1) = '0' THEN 'feed' ELSE 'webhook' END,
                   CASE WHEN right(a.title, 2) = '00' THEN a.closed_at + interval '1 day' END,
                   CASE WHEN right(a.title, 2) = '00' THEN 'HTTP 500' ELSE '' END,
                   a.agent_id, a.id, a.session_id
            FROM askcards_ask a WHERE a.title LIKE 'Seeded question %%'
            ORDER BY a.closed_at, a.id""")
        cur.execute("""UPDATE askcards_agent SET event_seq = e.seq
                       FROM (SELECT agent_id, max(seq) AS seq FROM askcards_outboxevent GROUP BY agent_id) e
                       WHERE e.agent_id = askcards_agent.id""")
    conn.execute("ANALYZE")
    return counts


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dsn")
    for name, default in vars(Size()).items():
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    size = Size(**{name: getattr(args, name) for name in vars(Size())})
    started = time.perf_counter()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        counts = seed(conn, size)
    print(f"seeded in {time.perf_counter() - started:.1f} s:", counts)


if __name__ == "__main__":
    main()
