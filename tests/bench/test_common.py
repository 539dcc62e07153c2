"""The benchmarks' shared printing (tests/bench/common.py): the summary over rounds, the targets
judged on the median, the machine's idle warning and the build's commit. Someone comparing two
runs' figures reads exactly these lines."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.bench import common
from tests.bench.common import Figure, Machine, at_least, below, exactly


def table(capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """The summary's rows by figure name: the columns after the name."""
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        for name in ("wake p99", "capacity ratio", "lost", "only once"):
            if line.startswith(name + " "):
                rows[name] = line[len(name):].split()
    return rows


def machine(load: float, cores: int = 2) -> Machine:
    return Machine(cores=cores, affinity=cores, load=(load, load, load), yardstick_ms=500.0, yardstick_cpu_ms=490.0)


@pytest.fixture
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """read_machine without running the yardstick; the loads it reports, one per call, are the list's."""
    loads = [0.2]

    def read() -> Machine:
        return machine(loads.pop(0) if len(loads) > 1 else loads[0])

    monkeypatch.setattr(common, "read_machine", read)
    monkeypatch.setattr(common, "build_line", lambda: "build: commit test")
    monkeypatch.setattr(common, "settle", lambda: 0.0)
    return loads


def test_a_round_waits_for_the_load_its_predecessor_left_and_no_longer_than_its_bound(monkeypatch):
    cores = os.cpu_count() or 1
    decaying = iter([3.0 * cores, 2.0 * cores, 0.1 * cores])
    monkeypatch.setattr(common.os, "getloadavg", lambda: (next(decaying), 0.0, 0.0))
    assert common.settle(limit=10, every=0.01) < 1  # waited for two readings, then went on
    monkeypatch.setattr(common.os, "getloadavg", lambda: (4.0 * cores, 0.0, 0.0))
    assert 0.2 <= common.settle(limit=0.2, every=0.05) < 1  # a machine that stays busy: the bound


def test_the_summary_gives_min_median_max_and_judges_each_target_on_the_median(quiet_machine, capsys):
    rounds = iter([
        [Figure("wake p99", 40.0, "ms", below(100)), Figure("capacity ratio", 0.7, "", at_least(0.5)),
         Figure("lost", 0, "", exactly(0))],
        [Figure("wake p99", 250.0, "ms", below(100)), Figure("capacity ratio", 0.2, "", at_least(0.5)),
         Figure("lost", 3, "", exactly(0)), Figure("only once", 7.0)],
        [Figure("wake p99", 60.0, "ms", below(100)), Figure("capacity ratio", 0.3, "", at_least(0.5)),
         Figure("lost", 0, "", exactly(0))],
    ])
    seen = []

    def measure(number: int) -> list[Figure]:
        seen.append(number)
        return next(rounds)

    common.run_rounds("a benchmark", 3, measure)

    assert seen == [0, 1, 2]
    rows = table(capsys)
    # the worst round (250 ms) misses, but the median (60 ms) is what is judged
    assert rows["wake p99"] == ["ms", "40", "60", "250", "<", "100", "met"]
    assert rows["capacity ratio"] == ["0.200", "0.300", "0.700", ">=", "0.5", "MISSED"]
    assert rows["lost"] == ["0", "0", "3", "==", "0", "met"]
    assert rows["only once"] == ["7", "7", "7", "(in", "1", "of", "3", "rounds)"]


def test_each_round_starts_with_the_load_and_the_cpu_yardstick(quiet_machine, capsys):
    quiet_machine[:] = [0.1, 0.3, 0.5]
    common.run_rounds("a benchmark", 2, lambda number: [])
    out = capsys.readouterr().out
    load = next(line for line in out.splitlines() if line.startswith("load average (1 min) at round start"))
    yardstick = next(line for line in out.splitlines() if line.startswith("CPU yardstick at round start"))
    assert load.split()[-3:] == ["0.100", "0.200", "0.300"]
    assert yardstick.split()[-4:] == ["ms", "500", "500", "500"]
    assert out.splitlines()[-1].startswith("machine at end: 2 cores (os.cpu_count), affinity 2; load average 0.50")


def test_a_loaded_machine_is_called_not_quotable_at_start_and_in_the_summary(quiet_machine, capsys):
    quiet_machine[:] = [1.2, 0.4, 0.4]  # 1.2 on 2 cores: over half a core each
    common.run_rounds("a benchmark", 2, lambda number: [Figure("lost", 0, "", exactly(0))])
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "WARNING: machine not idle: figures not quotable (load average 1.20 > 0.5 x 2 cores)"
    assert "WARNING: machine not idle at the start of round 1 at 1.20 (> 0.5 per core): figures not quotable" in out


def test_an_idle_machine_gets_no_warning(quiet_machine, capsys):
    quiet_machine[:] = [0.9]  # below 0.5 per core on 2 cores
    common.run_rounds("a benchmark", 1, lambda number: [])
    assert "WARNING" not in capsys.readouterr().out


def test_the_rounds_done_are_summed_up_when_a_later_round_fails(quiet_machine, capsys):
    def measure(number: int) -> list[Figure]:
        if number == 1:
            raise RuntimeError("server exited early")
        return [Figure("wake p99", 42.0, "ms", below(100))]

    with pytest.raises(RuntimeError, match="server exited early"):
        common.run_rounds("a benchmark", 3, measure)
    out = capsys.readouterr().out
    assert "=== SUMMARY of a benchmark: 1 round, min / median / max" in out
    assert table_line(out, "wake p99") == ["ms", "42", "42", "42", "<", "100", "met"]


def table_line(out: str, name: str) -> list[str]:
    return next(line[len(name):].split() for line in out.splitlines() if line.startswith(name + " "))


def test_the_commit_says_dirty_when_the_tree_has_changes(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-q", "-m", "one")
    short = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert common.git_commit(tmp_path) == short
    (tmp_path / "a.py").write_text("x = 2\n")
    assert common.git_commit(tmp_path) == short + "+dirty"
    git("checkout", "-q", "a.py")
    (tmp_path / "new.py").write_text("")  # an untracked module can be imported too
    assert common.git_commit(tmp_path) == short + "+dirty"


def test_the_cpu_yardstick_is_the_fixed_workload_timed_in_this_process():
    wall, cpu = common.cpu_yardstick()
    assert common._workload(common.YARDSTICK_LOOPS) == common.YARDSTICK_CHECKSUM
    assert wall > 0 and 0 < cpu <= wall * 1.05  # this process's own CPU: at most its wall time
