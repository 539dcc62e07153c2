"""What every benchmark in tests/bench shares: printing, percentiles, the machine a run measured
and the rounds (``--rounds N``) with their summary table.

Each benchmark prints, at its start and at its end, a build line (the git commit, ``+dirty`` when
the tree has changes; Python and the key libraries' versions) and a machine line: the cores
(``os.cpu_count()`` and this process's CPU affinity), the load average and the CPU yardstick, a
fixed pure-Python workload (``YARDSTICK_LOOPS`` turns of a loop of dict, string and integer work)
timed in the benchmark's own process.
The code is the same for every benchmark, so figures from different runs can be set against what
the machine did right then: wall time well above the process CPU means other processes took the
cores. A load average above ``BUSY_LOAD_PER_CORE`` per core at the start prints "machine not
idle: figures not quotable".

``run_rounds`` runs a benchmark's whole measurement N times (each round builds its own servers,
after waiting up to ``SETTLE_SECONDS`` for the load the round before left to decay),
each round returning its figures (``Figure``: name, value, unit, optionally a ``Target``), and
prints them in one table: min / median / max over the rounds, each target beside the median,
met or missed on the median.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import platform
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
YARDSTICK_LOOPS = 2_200_000  # fixed: changing it makes every earlier yardstick figure incomparable
YARDSTICK_CHECKSUM = 822_657  # what the workload computes: a changed workload fails loudly
BUSY_LOAD_PER_CORE = 0.5
LIBRARIES = ("Django", "djangorestframework", "channels", "daphne", "Twisted", "mcp", "aiohttp", "psycopg",
             "redis")


def say(message: str = "") -> None:
    print(message, flush=True)


def percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(pct / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[index]


# ---------------------------------------------------------------------------------- the machine


def _workload(loops: int) -> int:
    counts: dict[str, int] = {}
    checksum = 0
    for i in range(loops):
        key = f"k{i % 1009}"
        counts[key] = counts.get(key, 0) + 1
        checksum = (checksum * 31 + len(key) + i) % 1_000_003
    return checksum


def cpu_yardstick(loops: int = YARDSTICK_LOOPS) -> tuple[float, float]:
    """The fixed workload timed in this process: (wall ms, this process's CPU ms)."""
    started, started_cpu = time.perf_counter(), time.process_time()
    checksum = _workload(loops)
    wall, cpu = (time.perf_counter() - started) * 1000, (time.process_time() - started_cpu) * 1000
    if loops == YARDSTICK_LOOPS and checksum != YARDSTICK_CHECKSUM:
        raise RuntimeError(f"the CPU yardstick computed {checksum}, not {YARDSTICK_CHECKSUM}: it is not the same "
                           "workload any more, and its figures no longer compare with earlier ones")
    return wall, cpu


@dataclass(frozen=True)
class Machine:
    cores: int
    affinity: int
    load: tuple[float, float, float]
    yardstick_ms: float
    yardstick_cpu_ms: float

    @property
    def busy(self) -> bool:
        """The 1-minute load average above BUSY_LOAD_PER_CORE per core."""
        return self.load[0] > BUSY_LOAD_PER_CORE * self.cores


SETTLE_SECONDS = 180  # the longest a round waits for the load its predecessor left to decay


def settle(limit: float = SETTLE_SECONDS, every: float = 5.0) -> float:
    """Wait until the 1-minute load average is at most BUSY_LOAD_PER_CORE per core, for at most
    ``limit`` seconds; the seconds waited. A round leaves its own load behind (the average decays
    by half in about 42 s), which the next round's start would otherwise read as a busy machine."""
    cores = os.cpu_count() or 1
    started = time.monotonic()
    while os.getloadavg()[0] > BUSY_LOAD_PER_CORE * cores and time.monotonic() - started < limit:
        time.sleep(every)
    return time.monotonic() - started


def read_machine() -> Machine:
    """Cores, affinity and load average, then the CPU yardstick (the load is read first: the
    yardstick itself would raise it)."""
    load = os.getloadavg()
    wall, cpu = cpu_yardstick()
    return Machine(os.cpu_count() or 1, len(os.sched_getaffinity(0)), load, wall, cpu)


def machine_line(when: str, machine: Machine) -> str:
    load = " / ".join(f"{value:.2f}" for value in machine.load)
    return (f"machine {when}: {machine.cores} cores (os.cpu_count), affinity {machine.affinity}; load average "
            f"{load} (1 / 5 / 15 min); CPU yardstick {machine.yardstick_ms:.0f} ms "
            f"(process CPU {machine.yardstick_cpu_ms:.0f} ms, {YARDSTICK_LOOPS:,} loops of tests/bench/common.py)")


def busy_warning(machine: Machine) -> str:
    return (f"WARNING: machine not idle: figures not quotable (load average {machine.load[0]:.2f} > "
            f"{BUSY_LOAD_PER_CORE} x {machine.cores} cores)")


def git_commit(directory: Path = PROJECT_DIR) -> str:
    """``git rev-parse --short HEAD``, with ``+dirty`` when the tree has changes (untracked files
    included: an untracked module can be imported)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"
    return commit + ("+dirty" if dirty else "")


def versions(libraries: tuple[str, ...] = LIBRARIES) -> str:
    found = [f"Python {platform.python_version()}"]
    for name in libraries:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    found.append(f"SQLite {sqlite3.sqlite_version}")
    return ", ".join(found)


def build_line() -> str:
    return f"build: commit {git_commit()}; {versions()}"


# ----------------------------------------------------------------------------- figures, rounds


@dataclass(frozen=True)
class Target:
    op: str  # "<", "<=", ">", ">=", "=="
    bound: float

    def met(self, value: float) -> bool:
        if math.isnan(value):
            return False
        return {"<": value < self.bound, "<=": value <= self.bound, ">": value > self.bound,
                ">=": value >= self.bound, "==": value == self.bound}[self.op]

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


def below(bound: float) -> Target:
    return Target("<", bound)


def at_most(bound: float) -> Target:
    return Target("<=", bound)


def at_least(bound: float) -> Target:
    return Target(">=", bound)


def exactly(bound: float) -> Target:
    return Target("==", bound)


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str = ""
    target: Target | None = None


def number(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if float(value).is_integer() and abs(value) < 1e9:
        return f"{value:.0f}"
    size = abs(value)
    return f"{value:.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 1 \
        else f"{value:.3f}"


def add_rounds_argument(parser: argparse.ArgumentParser, flag: str = "--rounds") -> None:
    parser.add_argument(flag, type=int, default=1, dest="repeat", metavar="N",
                        help="run the whole measurement N times (each from fresh servers) and print min / median / "
                             "max of every figure over them, with the targets, at the end; default 1")


def check_rounds(parser: argparse.ArgumentParser, rounds: int, flag: str = "--rounds") -> None:
    if not 1 <= rounds <= 50:
        parser.error(f"{flag}: 1 to 50")


@dataclass(frozen=True)
class Row:
    name: str
    unit: str
    values: list[float]  # one per round that had the figure
    target: Target | None

    @property
    def median(self) -> float:
        known = [v for v in self.values if not math.isnan(v)]
        return statistics.median(known) if known else float("nan")


def summarize(rounds: list[list[Figure]]) -> list[Row]:
    """The figures of every round by name, in the order they first appeared; a figure's target and
    unit are those of its last round."""
    values: dict[str, list[float]] = {}
    last: dict[str, Figure] = {}
    for figures in rounds:
        for figure in figures:
            values.setdefault(figure.name, []).append(float(figure.value))
            last[figure.name] = figure
    return [Row(name, last[name].unit, found, last[name].target) for name, found in values.items()]


def summary_lines(title: str, rounds: list[list[Figure]], note: str = "", word: str = "round") -> list[str]:
    rows = summarize(rounds)
    width = min(80, max([len(row.name) for row in rows] + [6]))
    lines = [f"=== SUMMARY of {title}: {len(rounds)} {word}{'s' if len(rounds) != 1 else ''}, min / median / max "
             f"over the {word}s; each target on the median ==="]
    if note:
        lines.append(note)
    lines.append(f"{'figure':<{width}} {'unit':<9} {'min':>9} {'median':>9} {'max':>9}  {'target':<12} verdict")
    met = missed = 0
    missed_names: list[str] = []
    for row in rows:
        known = [v for v in row.values if not math.isnan(v)]
        low, high = (min(known), max(known)) if known else (float("nan"), float("nan"))
        line = f"{row.name:<{width}} {row.unit:<9} {number(low):>9} {number(row.median):>9} {number(high):>9}"
        if row.target is not None:
            ok = row.target.met(row.median)
            met, missed = met + ok, missed + (not ok)
            if not ok:
                missed_names.append(row.name)
            line += f"  {str(row.target):<12} {'met' if ok else 'MISSED'}"
        if len(row.values) != len(rounds):
            line += f"  (in {len(row.values)} of {len(rounds)} {word}s)"
        lines.append(line.rstrip())
    if met or missed:
        lines.append(f"targets on the median: {met} met, {missed} missed"
                     + (f" ({'; '.join(missed_names)})" if missed_names else ""))
    return lines


def run_rounds(title: str, rounds: int, measure: Callable[[int], list[Figure]], note: str = "",
               word: str = "round") -> list[list[Figure]]:
    """Run ``measure(round_number)`` ``rounds`` times between the build and machine lines, then
    print the summary table (also of the rounds done when one fails, before its error goes on).
    Each round's figures start with the load average and the CPU yardstick at its start.
    ``word`` is what the output calls a round ("run" where ``--rounds`` means something else)."""
    say(build_line())
    machine = read_machine()
    say(machine_line("at start", machine))
    busy: list[str] = []
    if machine.busy:
        say(busy_warning(machine))
    done: list[list[Figure]] = []
    try:
        for index in range(rounds):
            if index:
                waited = settle()
                machine = read_machine()
            if rounds > 1:
                say()
                say(f"##### {word} {index + 1} of {rounds}")
                if index:
                    if waited >= 1:
                        say(f"waited {waited:.0f} s for the load of the {word} before to decay")
                    say(machine_line(f"at the start of {word} {index + 1}", machine))
                    if machine.busy:
                        say(busy_warning(machine))
            if machine.busy:
                busy.append(f"{word} {index + 1} at {machine.load[0]:.2f}")
            figures = [Figure(f"load average (1 min) at {word} start", machine.load[0]),
                       Figure(f"CPU yardstick at {word} start", machine.yardstick_ms, "ms"), *measure(index)]
            done.append(figures)
    finally:
        if done:
            say()
            for line in summary_lines(title, done, note, word):
                say(line)
            if busy:
                say(f"WARNING: machine not idle at the start of {', '.join(busy)} (> {BUSY_LOAD_PER_CORE} per core): "
                    "figures not quotable")
            say(build_line())
            say(machine_line("at end", read_machine()))
    return done


def analyze(database_url: str) -> None:
    """``ANALYZE`` a benchmark's PostgreSQL database, as autovacuum does on its own once a table
    has changed by a tenth (on by default). A server may run with autovacuum off (this project's
    CI machine does), and without statistics the planner guesses: with a thousand users granted
    to one agent it chose to walk every grant for each panel read, many times slower than the
    index. A deployment has statistics; so do the measurements (after seeding)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("ANALYZE")
