"""Prometheus metrics: what ``GET /metrics`` reports, and the few counters the code updates.

Two kinds of figures, so that a deployment of several server and worker processes reports true
numbers whichever process is scraped:

- **Read from the database at scrape time** (``DatabaseCollector``): asks created and closed (by
  tool, platform, status and reason), open asks, answer times, answers by surface, ignored clicks,
  the card-sync backlog, webhook deliveries and their backlog, connected panel sockets. The rows
  are the truth and every process reads the same rows, so every process reports the same.
- **Counted in the process** where it happens: callback latency and refusals, parked waiters
  (long-polls, MCP calls) and failed card pushes. One process (``manage.py serve``) reports them
  all. With several processes, set ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory shared by
  every process of the host: each process then writes its values there (prometheus_client's
  multiprocess mode) and a scrape of any process sums them (gauges: the live processes' sum).

Instrumentation is one line at the edge: ``callback_timer``, ``callback_refused``, ``parked``,
``card_push_failed``.
"""
from __future__ import annotations

import atexit
import functools
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone
from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import REGISTRY, Collector

logger = logging.getLogger(__name__)

MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The text format every Prometheus reads (the names are plain ASCII, so the body is the same).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# No "<name>_created" series beside every counter and histogram: noise for a scraper.
disable_created_metrics()

# Callbacks must be answered within 2-3 s (DingTalk, Feishu): the buckets resolve that range.
CALLBACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
# From seconds (a quick click) to the longest deadlines (Feishu's 13 days).
ANSWER_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0, 13 * 86400.0)

CALLBACK_SECONDS = Histogram(
    "askcards_callback_seconds", "Time to answer a platform callback (HTTP), by platform.",
    ["platform"], buckets=CALLBACK_BUCKETS,
)
CALLBACK_REFUSALS = Counter(
    "askcards_callback_refusals", "Platform callbacks refused before any click was handled, by platform and cause.",
    ["platform", "cause"],
)
PARKED = Gauge(
    "askcards_parked_waiters", "Requests parked until something happens: REST long-polls and MCP calls.",
    ["kind"], multiprocess_mode="livesum",
)
QUOTA_REFUSALS = Counter(
    "askcards_quota_refusals", "Agent requests refused (429) by one of the agent's quotas, by quota.", ["quota"],
)
CARD_PUSH_FAILURES = Counter(
    "askcards_card_push_failures", "Failed card pushes (Feishu PATCH, DingTalk PUT), by platform and whether "
    "they will be retried or were given up.",
    ["platform", "outcome"],
)

# Causes of callback refusals (the label's values): unknown_app (no active bot with that id),
# secrets_unreadable (the bot's secrets cannot be decrypted), malformed (unreadable body, 400),
# verification (signature, token, encryption or timestamp refused, 401), no_api_secret (a DingTalk
# HTTP bot without the secret that signs callbacks), replayed (a DingTalk signature pair used twice).
CALLBACK_CAUSES = ("unknown_app", "secrets_unreadable", "malformed", "verification", "no_api_secret", "replayed")


def callback_refused(platform: str, cause: str) -> None:
    CALLBACK_REFUSALS.labels(platform, cause).inc()


def callback_timer(platform: str):
    """Decorate a callback handler: its duration is observed for ``platform``."""

    def decorate(handle):
        histogram = CALLBACK_SECONDS.labels(platform)

        @functools.wraps(handle)
        def timed(*args: Any, **kwargs: Any):
            started = time.perf_counter()
            try:
                return handle(*args, **kwargs)
            finally:
                histogram.observe(time.perf_counter() - started)

        return timed

    return decorate


@contextmanager
def parked(kind: str) -> Iterator[None]:
    """Count a request as parked (``kind``: rest | mcp) while the block runs."""
    gauge = PARKED.labels(kind)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def quota_refused(quota: str) -> None:
    QUOTA_REFUSALS.labels(quota).inc()


def card_push_failed(platform: str, *, gave_up: bool) -> None:
    CARD_PUSH_FAILURES.labels(platform, "given_up" if gave_up else "retry").inc()


# ----------------------------------------------------------------------------------- the database


class DatabaseCollector(Collector):
    """The figures the database holds, read at scrape time (``askcards.selectors``). When the
    database cannot be read, the scrape still serves the process's own figures and says so in
    ``askcards_metrics_database_up``."""

    def collect(self):
        try:
            families = list(self._families())
        except DatabaseError as exc:
            logger.warning("metrics: the database could not be read (%s); serving the in-process metrics only",
                           type(exc).__name__)
            families = []
        yield from families
        yield GaugeMetricFamily("askcards_metrics_database_up", "1 when this scrape read the database's figures.",
                                value=1 if families else 0)

    def _families(self):
        from askcards import selectors
        from askcards.models import Ask

        now = timezone.now()
        created = CounterMetricFamily("askcards_asks_created", "Asks created, by tool and session platform.",
                                      labels=["tool", "platform"])
        closed = CounterMetricFamily("askcards_asks_closed", "Asks that ended, by tool, platform, status and reason.",
                                     labels=["tool", "platform", "status", "reason"])
        open_ = GaugeMetricFamily("askcards_asks_open", "Asks being delivered (reserved) or waiting (pending).",
                                  labels=["tool", "platform", "status"])
        made: dict[tuple[str, str], int] = {}
        ended: dict[tuple[str, str, str, str], int] = {}
        # Asks retention deleted still count as made and ended (counters never go down).
        pruned = selectors.metrics_pruned()
        asks = [(row["tool"], row["session__platform"], row["status"], row["reason"], row["count"])
                for row in selectors.metrics_asks()]
        asks += [(*labels, count) for labels, count in pruned["asks"] if len(labels) == 4]
        for tool, platform, status, reason, count in asks:
            made[(tool, platform)] = made.get((tool, platform), 0) + count
            if status in Ask.OPEN:
                open_.add_metric([tool, platform, status], count)
            else:
                ended[(tool, platform, status, reason)] = ended.get((tool, platform, status, reason), 0) + count
        for key, count in sorted(ended.items()):
            closed.add_metric(list(key), count)
        for (tool, platform), count in sorted(made.items()):
            created.add_metric([tool, platform], count)
        yield from (created, closed, open_)

        answer = HistogramMetricFamily(
            "askcards_answer_seconds", "Answered asks: seconds from being shown to being answered, by tool.",
            labels=["tool"],
        )
        for row in selectors.metrics_answer_times(ANSWER_BUCKETS):
            buckets = [(_le(bound), row[f"le_{index}"]) for index, bound in enumerate(ANSWER_BUCKETS)]
            answer.add_metric([row["tool"]], [*buckets, ("+Inf", row["count"])], row["seconds"])
        yield answer

        responses = CounterMetricFamily("askcards_responses", "People's answers, by tool, surface and status.",
                                        labels=["tool", "surface", "status"])
        answered: dict[tuple[str, str, str], int] = {}
        rows = [((row["ask__tool"], row["surface"], row["status"]), row["count"]) for row in selectors.metrics_responses()]
        rows += [(tuple(labels), count) for labels, count in pruned["responses"] if len(labels) == 3]
        for key, count in rows:
            answered[key] = answered.get(key, 0) + count
        for key, count in sorted(answered.items()):
            responses.add_metric(list(key), count)
        yield responses

        ignored = CounterMetricFamily(
            "askcards_clicks_ignored", "Clicks that changed nothing (late, not the asker, blank, ...), by surface and cause.",
            labels=["surface", "cause"],
        )
        for (surface, cause), count in sorted(selectors.metrics_ignored_clicks().items()):
            ignored.add_metric([surface, cause], count)
        yield ignored

        backlog = GaugeMetricFamily("askcards_card_sync_backlog", "Card messages behind their latest state.",
                                    labels=["platform"])
        failing = GaugeMetricFamily("askcards_card_sync_failing", "Card messages whose last push failed (retry pending).",
                                    labels=["platform"])
        for row in selectors.metrics_card_sync():
            backlog.add_metric([row["platform"]], row["backlog"])
            failing.add_metric([row["platform"]], row["failing"])
        yield from (backlog, failing)

        outbox = selectors.metrics_outbox(now)
        deliveries = CounterMetricFamily("askcards_webhook_deliveries", "Agent events by webhook outcome.",
                                         labels=["outcome"])
        deliveries.add_metric(["delivered"], outbox["delivered"])
        deliveries.add_metric(["given_up"], outbox["given_up"])
        yield deliveries
        yield CounterMetricFamily("askcards_webhook_attempts", "Webhook POSTs made.", value=outbox["attempts"])
        yield GaugeMetricFamily("askcards_webhook_backlog", "Events waiting for their webhook delivery.",
                                value=outbox["backlog"])
        yield GaugeMetricFamily("askcards_webhook_backlog_oldest_seconds",
                                "Age of the oldest event waiting for its webhook (0 when none).",
                                value=outbox["oldest_seconds"])
        yield GaugeMetricFamily("askcards_panel_sockets", "Connected web panel sockets (every process).",
                                value=selectors.metrics_panel_sockets(now))


def _le(bound: float) -> str:
    return repr(float(bound))


DATABASE = DatabaseCollector()


# ---------------------------------------------------------------------------------------- scrape


def multiprocess_dir() -> str:
    return os.environ.get(MULTIPROCESS_DIR_ENV, "")


if multiprocess_dir():
    from prometheus_client import multiprocess as _multiprocess

    # A gauge summed over live processes must forget this one when it ends.
    atexit.register(_multiprocess.mark_process_dead, os.getpid())


class _Scrape:
    def __init__(self, *collectors: Any):
        self.collectors = collectors

    def collect(self):
        for collector in self.collectors:
            yield from collector.collect()


def render() -> tuple[bytes, str]:
    """The metrics text and its content type: the process's own metrics (or, in multiprocess
    mode, every process's, from ``PROMETHEUS_MULTIPROC_DIR``) and the database's."""
    directory = multiprocess_dir()
    if directory:
        from prometheus_client.multiprocess import MultiProcessCollector

        from_processes: Any = MultiProcessCollector(None, path=directory)
    else:
        from_processes = REGISTRY  # this process: the metrics above and the Python process's own
    return generate_latest(_Scrape(from_processes, DATABASE)), CONTENT_TYPE


# ---------------------------------------------------------------------------------------- access


def refusal(*, authorization: str, remote_addr: str) -> int | None:
    """None when a scrape may read the metrics, else the HTTP status to refuse it with.

    Nothing configured (neither ASKCARDS_METRICS_TOKEN nor ASKCARDS_METRICS_ALLOW): 404, as if
    there were no such page. With a token, the request must carry ``Authorization: Bearer <token>``
    (compared in constant time; 401 otherwise); with an allow-list, it must come from one of its
    addresses or networks (403 otherwise). With both, both must hold."""
    token: str = settings.ASKCARDS_METRICS_TOKEN
    allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = settings.ASKCARDS_METRICS_ALLOW
    if not token and not allowed:
        return 404
    if allowed and not _address_allowed(remote_addr, allowed):
        return 403
    if token:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return 401
    return None


def _address_allowed(remote_addr: str, allowed) -> bool:
    try:
        address = ipaddress.ip_address(remote_addr.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == network.version and address in network for network in allowed)

