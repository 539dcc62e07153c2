"""The official MCP conformance suite (``@modelcontextprotocol/conformance``) against a real
``manage.py serve``: every scenario the suite lists passes, except those in ``NOT_CLAIMED``.

Two releases of the suite are pinned in tests/mcp/conformance/package.json (with Node 22, which
both need, from the registry's ``node-linux-*`` packages: the system's Node may be older):

- ``stable``: its latest stable release, whose scenarios speak the initialize handshake
  (2025-11-25);
- ``next``: its prerelease, the only one with the stateless 2026-07-28 revision's scenarios and
  the ``io.modelcontextprotocol/tasks`` extension's, run at each revision askcards speaks
  (``--spec-version`` 2025-06-18, 2025-11-25, 2026-07-28) and the extension scenarios on the
  2026-07-28 wire.

The scenarios come from the suite's own ``list``, so a scenario a new release adds is claimed
until it passes or is listed in ``NOT_CLAIMED`` with its reason. A key there is a scenario
(``name``), a scenario at one revision (``name@2025-11-25``), or one check of a claimed scenario
(``name/check-id``): a check the suite cannot exercise on askcards (it needs the suite's fixture
tools) or one where the suite is wrong. A claimed scenario passes when every check it reports is
SUCCESS or INFO or is listed, and at least one of its own checks (not the schema check every
scenario adds) succeeded. A listed key the suite no longer reports, or a listed check that
succeeds everywhere, fails the test: the list cannot go stale. The MCP page (docs/agents/mcp.md) shows the
same list (``test_the_mcp_page_lists_what_is_not_claimed``).

The suite sends no ``Authorization`` header and names no session: it calls a local proxy
(``tests.mcp.authproxy``) that adds both. The session is the web panel's with ``host=ask``, the
configuration in which askcards answers with ``input_required`` (2026-07-28) and sends
``elicitation/create`` (2025-06-18, 2025-11-25) to a client that declares form elicitation.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import npm
from tests.conftest import require
from tests.mcp import authproxy, support

HERE = Path(__file__).resolve().parent / "conformance"
MCP_PAGE = Path(__file__).resolve().parents[2] / "docs" / "agents" / "mcp.md"
NODE = HERE / "node_modules" / ".bin" / "node"
NODE_MAJOR = "v22."
SUITES = {"stable": "@modelcontextprotocol/conformance", "next": "conformance-next"}  # package.json names
QUERY = "session=conformance&platform=web&web_user=alice&host=ask"
SCENARIO_TIMEOUT = 30  # seconds for one scenario run of the suite's CLI
PARALLEL = 3  # scenario runs at once (each mostly waits: on Node starting, on the server)
SCHEMA_CHECK = "wire-schema-valid"  # the check the prerelease adds to every scenario
PASSING = {"SUCCESS", "INFO"}

FIXTURE = "calls the suite's fixture tool"  # askcards lists only the session's own tools
APP_RESOURCE = "askcards' only resource is its MCP App, listed only to clients that declare MCP Apps"
HOST_FORMS = "askcards' own forms are an ask's questions (host=ask: tests/mcp/test_host_elicitation.py)"
NOT_CLAIMED: dict[str, str] = {
    # Features askcards does not offer.
    "logging-set-level": "askcards declares no logging capability (logging/setLevel is -32601)",
    "completion-complete": "askcards declares no completions capability (it has no prompts or resource templates)",
    "resources-read-text": f"reads the suite's fixture resource test://static-text; {APP_RESOURCE}",
    "resources-read-binary": f"reads the suite's fixture resource test://static-binary; {APP_RESOURCE}",
    "resources-templates-read":
        "reads the suite's fixture resource template test://template/{id}/data; askcards has no resource templates",
    "resources-subscribe":
        "askcards offers no resource subscriptions (resources.subscribe is false, resources/subscribe is -32601)",
    "resources-unsubscribe":
        "askcards offers no resource subscriptions (resources.subscribe is false, resources/unsubscribe is -32601)",
    "prompts-list": "askcards offers no prompts",
    "prompts-get-simple": "askcards offers no prompts",
    "prompts-get-with-args": "askcards offers no prompts",
    "prompts-get-embedded-resource": "askcards offers no prompts",
    "prompts-get-with-image": "askcards offers no prompts",
    "sep-2640-skills-directory": "askcards offers no skills extension (the suite skips every check)",
    "sep-2640-skills-enumeration": "askcards offers no skills extension (the suite skips every check)",
    "sep-2640-skills-manifest": "askcards offers no skills extension (the suite skips every check)",
    "http-custom-header-server-validation":
        "no askcards tool declares x-mcp-header parameters (no Mcp-Param-* headers)",
    "server-session-lifecycle":
        "askcards is stateless: no Mcp-Session-Id, so the suite reports the lifecycle not applicable",
    "server-sse-polling":
        "needs an Mcp-Session-Id and a GET stream (SEP-1699) and the fixture tool test_reconnection; askcards is "
        "stateless (GET is 405)",
    "server-sse-multiple-streams@2025-11-25":
        "on this revision the suite needs an Mcp-Session-Id (optional in the spec); askcards is stateless (claimed "
        "on 2026-07-28)",
    # The suite's fixture tools: askcards lists the session's own tools only.
    "tools-call-simple-text": f"{FIXTURE} test_simple_text",
    "tools-call-image": f"{FIXTURE} test_image_content",
    "tools-call-audio": f"{FIXTURE} test_audio_content",
    "tools-call-embedded-resource": f"{FIXTURE} test_embedded_resource",
    "tools-call-mixed-content": f"{FIXTURE} test_multiple_content_types",
    "tools-call-error": f"{FIXTURE} test_error_handling (askcards' tool errors: tests/mcp/test_mcp_serve.py)",
    "tools-call-with-progress": f"{FIXTURE} test_tool_with_progress (askcards' progress: tests/mcp/test_mcp_serve.py)",
    "tools-call-with-logging": f"{FIXTURE} test_tool_with_logging; askcards sends no log messages",
    "tools-call-sampling": f"{FIXTURE} test_sampling; askcards never asks the client's model",
    "tools-call-elicitation":
        f"{FIXTURE} test_elicitation and answers its form with fixed content (username, email); {HOST_FORMS}",
    "elicitation-sep1034-defaults":
        f"{FIXTURE} test_elicitation_sep1034_defaults and checks its form's fixed fields and defaults; {HOST_FORMS}",
    "elicitation-sep1330-enums":
        f"{FIXTURE} test_elicitation_sep1330_enums and checks its form's five fixed enum fields; {HOST_FORMS}",
    "json-schema-2020-12": f"{FIXTURE} json_schema_2020_12_tool",
    "input-required-result-basic-elicitation":
        f"{FIXTURE} test_input_required_result_elicitation (askcards' input_required: tests/mcp/test_host_surface.py)",
    "input-required-result-basic-sampling": f"{FIXTURE} test_input_required_result_sampling; askcards never samples",
    "input-required-result-basic-list-roots":
        f"{FIXTURE} test_input_required_result_list_roots; askcards asks for no roots",
    "input-required-result-request-state":
        f"{FIXTURE} test_input_required_result_request_state (askcards' signed requestState: "
        "tests/mcp/test_host_surface.py)",
    "input-required-result-multiple-input-requests": f"{FIXTURE} test_input_required_result_multiple_inputs",
    "input-required-result-multi-round": f"{FIXTURE} test_input_required_result_multi_round",
    "input-required-result-missing-input-response": f"{FIXTURE} test_input_required_result_elicitation",
    "input-required-result-result-type": f"{FIXTURE} test_input_required_result_elicitation",
    "input-required-result-tampered-state":
        f"{FIXTURE} test_input_required_result_tampered_state (askcards refuses a forged state: "
        "tests/mcp/test_host_surface.py)",
    "input-required-result-capability-check": f"{FIXTURE} test_input_required_result_capabilities",
    "input-required-result-ignore-extra-params": f"{FIXTURE} test_input_required_result_elicitation",
    "input-required-result-validate-input":
        f"{FIXTURE} test_input_required_result_elicitation; it passes only because an unknown tool is an error, "
        "which proves nothing",
    "input-required-result-non-tool-request":
        "asks the fixture prompt test_input_required_result_prompt; askcards offers no prompts",
    "tasks-lifecycle":
        f"{FIXTURE}s greet, slow_compute, failing_job, protocol_error_job; an askcards task ends when a person "
        "answers (tests/mcp/test_tasks_extension.py)",
    "tasks-wire-fields": f"{FIXTURE} slow_compute (askcards' task fields: tests/mcp/test_tasks_extension.py)",
    "tasks-request-state-removal": f"{FIXTURE} slow_compute",
    "tasks-mrtr-input":
        f"{FIXTURE}s confirm_delete and multi_input (askcards' input_required task: tests/mcp/test_host_surface.py)",
    "tasks-mrtr-composition": f"{FIXTURE} test_tool_with_task",
    "tasks-required-task-error": f"{FIXTURE} failing_job; no askcards tool requires a task (taskSupport is optional)",
    "tasks-status-notifications":
        "the suite skips its only check (its harness awaits a rewrite for subscriptions/listen)",
    # Checks of claimed scenarios that the suite cannot exercise on askcards.
    "server-stateless/sep-2575-server-rejects-undeclared-capability": f"{FIXTURE} test_missing_capability",
    "server-stateless/sep-2575-missing-capability-http-400": f"{FIXTURE} test_missing_capability",
    "server-stateless/sep-2575-http-server-no-independent-requests-on-stream": f"{FIXTURE} test_streaming_elicitation",
    "server-stateless/sep-2575-server-no-log-without-loglevel":
        f"{FIXTURE} test_logging_tool; askcards sends no log messages",
    "server-stateless/sep-2575-server-sends-subscription-ack":
        "askcards offers no subscriptions/listen (the suite skips it)",
    "server-stateless/sep-2575-server-tags-subscription-id":
        "askcards offers no subscriptions/listen (the suite skips it)",
    "server-stateless/sep-2575-server-honors-notification-filter":
        "askcards offers no subscriptions/listen (the suite skips it)",
    "server-stateless/sep-2575-server-sends-prompts-list-changed-on-subscription":
        "askcards declares no prompts (the suite skips it)",
    "server-stateless/sep-2575-server-sends-tools-list-changed-on-subscription":
        "a session's tools never change, so no tools.listChanged (the suite skips it)",
    "caching/sep-2549-prompts-list-caching-hints":
        "the suite is wrong: it calls prompts/list on a server that declares no prompts, where -32601 is the answer "
        "its own stateless scenario requires (sep-2575-discover-capabilities-match-handlers)",
    "caching/sep-2549-resources-read-caching-hints":
        "askcards lists its one resource (the MCP App) only to clients that declare MCP Apps, which the suite does "
        "not (it skips the check)",
    "tasks-capability-negotiation/sep-2663-server-rejects-undeclared-client":
        f"{FIXTURE} slow_compute (askcards: tests/mcp/test_tasks_extension.py)",
    "tasks-capability-negotiation/tasks-per-request-meta-opt-in":
        f"{FIXTURE} slow_compute (askcards: tests/mcp/test_tasks_extension.py)",
    "tasks-request-headers/tasks-headers-tolerate-mcp-method-on-tools-call": f"{FIXTURE} greet",
    "tasks-request-headers/sep-2663-routing-headers-accepted-on-tasks-get": f"{FIXTURE} slow_compute",
    "tasks-request-headers/sep-2663-server-rejects-mismatched-mcp-name-on-tasks-get":
        "needs the task of the fixture tool slow_compute",
    "tasks-dispatch-and-envelope/tasks-server-directed-creation-no-hint": f"{FIXTURE} failing_job",
    "tasks-dispatch-and-envelope/sep-2663-legacy-task-param-ignored": f"{FIXTURE} greet",
    "tasks-dispatch-and-envelope/tasks-immediate-result-shortcut": f"{FIXTURE} slow_compute",
    "tasks-dispatch-and-envelope/tasks-result-type-complete-on-non-task-responses": f"{FIXTURE} greet",
    "tasks-dispatch-and-envelope/sep-2663-durable-create-strong-consistency": f"{FIXTURE} slow_compute",
}


@dataclass(frozen=True)
class Run:
    """One pass of a suite: the scenarios it lists for ``era`` (or its extension scenarios)."""

    suite: str
    era: str  # the protocol revision its scenarios speak
    spec_version: str | None = None  # --spec-version (None: the suite's own choice)
    extensions: bool = False

    @property
    def label(self) -> str:
        return f"{self.suite} {'extensions' if self.extensions else self.era}"


RUNS = (
    Run("stable", "2025-11-25"),
    Run("next", "2025-06-18", "2025-06-18"),
    Run("next", "2025-11-25", "2025-11-25"),
    Run("next", "2026-07-28", "2026-07-28"),
    Run("next", "2026-07-28", extensions=True),
)


def pinned(suite: str) -> str:
    spec = json.loads((HERE / "package.json").read_text())["dependencies"][SUITES[suite]]
    return spec.rpartition("@")[2]  # "0.1.16", or an alias's "npm:<name>@<version>"


def cli(suite: str) -> Path:
    return HERE / "node_modules" / SUITES[suite] / "dist" / "index.js"


def _installed(suite: str) -> bool:
    manifest = HERE / "node_modules" / SUITES[suite] / "package.json"
    return manifest.exists() and json.loads(manifest.read_text())["version"] == pinned(suite) and cli(suite).exists()


def _node_version() -> str | None:
    try:
        done = subprocess.run([str(NODE), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _ready() -> bool:
    return (_node_version() or "").startswith(NODE_MAJOR) and all(_installed(suite) for suite in SUITES)


def _env(home: Path) -> dict[str, str]:
    return {"PATH": f"{NODE.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home), "NO_COLOR": "1"}


def scenarios(run: Run, home: Path) -> list[str]:
    """What ``conformance list --server`` lists for this run."""
    args = [str(NODE), str(cli(run.suite)), "list", "--server"]
    if run.spec_version:
        args += ["--spec-version", run.spec_version]
    done = subprocess.run(args, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, env=_env(home), cwd=home)
    assert done.returncode == 0, f"{run.label}: conformance list failed: {done.stderr or done.stdout}"
    listed = re.findall(r"^\s+- (\S+) \[([^\]]*)\]", done.stdout, re.MULTILINE)
    assert listed, f"{run.label}: conformance list listed nothing:\n{done.stdout}"
    return [name for name, tags in listed if (tags == "extension") == run.extensions]


def not_claimed(run: Run, scenario: str) -> str | None:
    return NOT_CLAIMED.get(scenario) or NOT_CLAIMED.get(f"{scenario}@{run.era}")


@dataclass
class Outcome:
    run: Run
    scenario: str
    checks: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_scenario(run: Run, scenario: str, url: str, work: Path) -> Outcome:
    """One scenario through the suite's CLI (bounded), judged by the checks it saved."""
    outcome = Outcome(run, scenario)
    out = Path(tempfile.mkdtemp(prefix=f"{scenario}-", dir=work))
    args = [str(NODE), str(cli(run.suite)), "server", "--url", url, "--scenario", scenario, "-o", str(out)]
    if run.spec_version:
        args += ["--spec-version", run.spec_version]
    started = time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, env=_env(work), cwd=work)
    except subprocess.TimeoutExpired:
        outcome.problems.append(f"did not finish within {SCENARIO_TIMEOUT} s")
        return outcome
    finally:
        outcome.seconds = time.monotonic() - started
    saved = sorted(out.glob("*/checks.json"))
    if not saved:
        outcome.problems.append(f"saved no checks (exit {done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
        return outcome
    outcome.checks = json.loads(saved[0].read_text())
    for check in outcome.checks:
        if check["status"] in PASSING or f"{scenario}/{check['id']}" in NOT_CLAIMED:
            continue
        why = check.get("errorMessage") or (check.get("details") or {}).get("message") or ""
        outcome.problems.append(f"{check['status']} {check['id']}: {why}"[:600])
    if not any(c["status"] == "SUCCESS" and c["id"] != SCHEMA_CHECK for c in outcome.checks):
        outcome.problems.append("no check of its own succeeded: the scenario exercised nothing on askcards")
    return outcome


def stale_entries(listed: dict[Run, list[str]], outcomes: list[Outcome]) -> list[str]:
    """``NOT_CLAIMED`` keys that no longer match what the suites report."""
    stale = []
    failing_checks = {f"{o.scenario}/{c['id']}" for o in outcomes for c in o.checks if c["status"] != "SUCCESS"}
    for key in NOT_CLAIMED:
        if "/" in key:
            if key not in failing_checks:
                stale.append(f"{key}: no claimed scenario reported this check other than as a success")
        elif "@" in key:
            scenario, era = key.split("@")
            if not any(scenario in names for run, names in listed.items() if run.era == era and not run.extensions):
                stale.append(f"{key}: no suite lists {scenario} at {era}")
        elif not any(key in names for names in listed.values()):
            stale.append(f"{key}: no suite lists it")
    return stale


@pytest.fixture(scope="module")
def suite_installed() -> None:
    why = npm.ci(HERE, _ready, what="the MCP conformance suite and Node 22")
    require(not why and _ready(), why or f"{NODE.relative_to(HERE.parents[2])} is not Node 22")


@pytest.mark.xdist_group("conformance")
def test_the_official_suite_passes_every_claimed_scenario(suite_installed, tmp_path):
    started = time.monotonic()
    home = tmp_path / "home"
    home.mkdir()
    listed = {run: scenarios(run, home) for run in RUNS}
    claimed = [(run, name) for run, names in listed.items() for name in names if not_claimed(run, name) is None]
    with support.seeded(tmp_path / "askcards") as (base, seed), authproxy.running(base, seed["key"], QUERY) as url:
        with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
            outcomes = list(pool.map(lambda claim: run_scenario(*claim, url, home), claimed))

    report = [f"{o.run.label:<20} {o.scenario:<45} {'FAIL' if o.problems else 'pass'} {o.seconds:4.1f} s"
              for o in outcomes]
    print("\n".join([f"conformance {pinned('stable')} (stable) and {pinned('next')} (next), node {_node_version()}:",
                     *report, f"{len(outcomes)} scenario runs in {time.monotonic() - started:.1f} s"]))
    failures = [f"{o.run.label} {o.scenario}: " + "; ".join(o.problems) for o in outcomes if o.problems]
    assert not failures, "claimed scenarios failed:\n" + "\n".join(failures)
    stale = stale_entries(listed, outcomes)
    assert not stale, "NOT_CLAIMED is out of date:\n" + "\n".join(stale)
    for era in ("2025-06-18", "2025-11-25", "2026-07-28"):
        assert any(o.run.era == era for o in outcomes), f"no claimed scenario ran at {era}"


@pytest.mark.xdist_group("conformance")
def test_the_suite_judges_askcards_itself_through_the_proxy(suite_installed, tmp_path):
    """A server that lets any Host in (``ALLOWED_HOSTS=*``) fails the DNS-rebinding scenario: the
    proxy hands the suite's own Host and Origin to askcards, and a failing check fails the run."""
    home = tmp_path / "home"
    home.mkdir()
    with support.seeded(tmp_path / "askcards", ALLOWED_HOSTS="*") as (base, seed), \
            authproxy.running(base, seed["key"], QUERY) as url:
        outcome = run_scenario(Run("next", "2025-11-25", "2025-11-25"), "dns-rebinding-protection", url, home)

    statuses = {check["id"]: check["status"] for check in outcome.checks}
    assert statuses == {"localhost-host-rebinding-rejected": "FAILURE", "localhost-host-valid-accepted": "SUCCESS"}
    assert outcome.problems == [
        "FAILURE localhost-host-rebinding-rejected: Expected HTTP 4xx for invalid Host/Origin headers, got 200"
    ]


LIST_START = "<!-- conformance-not-claimed: generated from NOT_CLAIMED in tests/mcp/test_conformance.py -->"
LIST_END = "<!-- /conformance-not-claimed -->"


def listed_block() -> str:
    lines = [f"- `{key}`: {reason}" for key, reason in NOT_CLAIMED.items()]
    return "\n".join([LIST_START, *lines, LIST_END])


def test_the_mcp_page_lists_what_is_not_claimed():
    text = MCP_PAGE.read_text()
    start, end = text.find(LIST_START), text.find(LIST_END)
    assert 0 <= start < end, f"docs/agents/mcp.md lacks the not-claimed list; put this in it:\n{listed_block()}"
    assert text[start:end + len(LIST_END)] == listed_block(), (
        f"docs/agents/mcp.md's not-claimed list differs from NOT_CLAIMED; replace it with:\n{listed_block()}"
    )
