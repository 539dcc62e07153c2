"""Drives the real Codex CLI (the ``@openai/codex`` version pinned in package-lock.json here) against
the fake Responses API of ``fake_responses``, with a command hook configured, all on this machine.

Why the interactive CLI and not ``codex exec``: ``codex exec`` forces ``approval_policy = "never"``
whatever config.toml or ``-c`` say, so it never reaches the approval path and never runs a
``PermissionRequest`` hook (``test_codex_exec_never_runs_the_permission_request_hook`` pins that).
The interactive CLI does; it runs in a tmux session of its own here, read with ``capture-pane``.

Each run gets its own ``HOME`` and ``CODEX_HOME`` under the test's temporary directory, a
config.toml naming the fake API as the model provider, and a clean environment (no real API key
or user config can leak in). ``--dangerously-bypass-hook-trust`` stands for the user having
trusted the hook in ``/hooks`` (Codex then stores ``[hooks.state."<key>"] trusted_hash = …``).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from tests.conftest import require

from .fake_responses import FakeResponsesAPI

HERE = Path(__file__).resolve().parent
CODEX_BIN = HERE / "node_modules" / ".bin" / "codex"
CODEX_VERSION = json.loads((HERE / "package.json").read_text())["dependencies"]["@openai/codex"]
DECISION_HOOK = HERE / "decision_hook.py"
FAKE_KEY_ENV = "ASKCARDS_FAKE_OPENAI_KEY"
PROVIDER_ID = "askcards-fake"


def require_codex(*, tui: bool = True) -> None:
    """Skip (fail under ASKCARDS_REQUIRE_SERVICES=1) when the pinned Codex CLI or tmux is missing."""
    require(CODEX_BIN.exists(), f"the Codex CLI {CODEX_VERSION} is not installed (run `npm ci` in {HERE.relative_to(HERE.parents[2])}; needs npm)")
    if tui:
        require(shutil.which("tmux") is not None, "tmux is missing (the interactive Codex CLI runs in a tmux session)")


def hook_command(record_dir: Path, behavior: str, message: str | None = None) -> str:
    """The command line of ``decision_hook.py``: records each event in ``record_dir`` and answers
    ``behavior`` (allow, deny, exit2, silent, sleep)."""
    args = [sys.executable, str(DECISION_HOOK), str(record_dir), behavior]
    if message is not None:
        args.append(message)
    return shlex.join(args)


def curl_hook_command(url: str, agent_key: str, *, max_time: int = 25) -> str:
    """A one-line command hook that forwards the event on stdin to ``url`` (askcards'
    ``/hooks/codex?session=…&platform=…``) with the agent key, and prints the reply for Codex.
    Codex runs hook commands through a shell. ``max_time`` should stay under the hook's timeout;
    when curl fails (exit code ≠ 0) Codex shows its own approval prompt instead."""
    return (f"curl -sS --max-time {max_time} -H {shlex.quote('Authorization: Bearer ' + agent_key)} "
            f"-H 'Content-Type: application/json' --data-binary @- {shlex.quote(url)}")


def recorded_events(record_dir: Path) -> list[dict]:
    """The events a ``decision_hook.py`` recorded, in the order Codex sent them."""
    return [json.loads(path.read_text()) for path in sorted(record_dir.glob("*.json"))]


def write_config(codex_home: Path, *, base_url: str, workdir: Path, hook_command: str | None, hook_timeout: int = 30) -> Path:
    """config.toml for one run: the fake API as model provider, approvals on request in the
    workspace-write sandbox, ``workdir`` trusted (no first-run trust screen), and when
    ``hook_command`` is given a PermissionRequest command hook with ``hook_timeout`` seconds."""
    codex_home.mkdir(parents=True, exist_ok=True)
    lines = [
        'model = "fake-model"',
        f'model_provider = "{PROVIDER_ID}"',
        'approval_policy = "on-request"',
        'sandbox_mode = "workspace-write"',
        "check_for_update_on_startup = false",
        "",
        "[features]",
        # Otherwise every start copies the 300 MB binary into CODEX_HOME/packages for a daemon.
        "daemon_auto_start = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        f"[model_providers.{PROVIDER_ID}]",
        'name = "askcards fake Responses API"',
        f"base_url = {json.dumps(base_url)}",
        'wire_api = "responses"',
        f'env_key = "{FAKE_KEY_ENV}"',
        "",
        f"[projects.{json.dumps(str(workdir))}]",
        'trust_level = "trusted"',
    ]
    if hook_command is not None:
        lines += [
            "",
            "[[hooks.PermissionRequest]]",
            "[[hooks.PermissionRequest.hooks]]",
            'type = "command"',
            f"command = {json.dumps(hook_command)}",
            f"timeout = {hook_timeout}",
        ]
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def codex_env(home: Path, codex_home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        FAKE_KEY_ENV: "fake-key-for-the-fake-api",
    }


def _layout(root: Path) -> tuple[Path, Path, Path]:
    home, workdir = root / "home", root / "work"
    codex_home = home / ".codex"
    workdir.mkdir(parents=True, exist_ok=True)
    return home, codex_home, workdir


def run_codex_exec(root: Path, api: FakeResponsesAPI, hook: str | None, *, prompt: str, hook_timeout: int = 30,
                   seconds: float = 90) -> subprocess.CompletedProcess[str]:
    """``codex exec --json`` once in ``root``/work with the hook configured; returns the finished process."""
    home, codex_home, workdir = _layout(root)
    write_config(codex_home, base_url=api.base_url, workdir=workdir, hook_command=hook, hook_timeout=hook_timeout)
    return subprocess.run(
        [str(CODEX_BIN), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", prompt],
        cwd=workdir, env=codex_env(home, codex_home), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=seconds,
    )


class CodexTUI:
    """The interactive Codex CLI in a tmux session of its own, started with ``prompt``::

        with FakeResponsesAPI([...]) as api, CodexTUI(tmp_path, api, hook_command(...), prompt="…") as codex:
            codex.wait_for_screen("done")
    """

    def __init__(self, root: Path, api: FakeResponsesAPI, hook: str | None, *, prompt: str, hook_timeout: int = 30) -> None:
        self.root = root
        self.api = api
        self.home, self.codex_home, self.workdir = _layout(root)
        self.config_path = write_config(self.codex_home, base_url=api.base_url, workdir=self.workdir,
                                        hook_command=hook, hook_timeout=hook_timeout)
        self.prompt = prompt
        self.socket = root / "tmux.sock"

    def __enter__(self) -> "CodexTUI":
        codex = shlex.join([str(CODEX_BIN), "--dangerously-bypass-hook-trust", self.prompt])
        # The pane outlives Codex so its last screen can still be read.
        script = f"cd {shlex.quote(str(self.workdir))} && {codex}; echo; echo \"codex exited with $?\"; sleep 600"
        subprocess.run(
            ["tmux", "-S", str(self.socket), "-f", "/dev/null", "new-session", "-d", "-s", "codex", "-x", "200", "-y", "60", script],
            env=codex_env(self.home, self.codex_home), check=True, timeout=10,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        # Ends the tmux server on this run's own socket (and so Codex and anything it started).
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=10)

    def screen(self) -> str:
        shown = subprocess.run(["tmux", "-S", str(self.socket), "capture-pane", "-p", "-J", "-t", "codex"],
                               capture_output=True, text=True, timeout=10)
        return shown.stdout

    def wait_for(self, ready: Callable[[], bool], what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"Codex did not get to {what} within {seconds} s; its screen:\n{self.screen()}")

    def wait_for_screen(self, text: str, seconds: float = 30) -> str:
        """Waits until ``text`` shows on Codex's screen; returns the screen."""
        self.wait_for(lambda: text in self.screen(), f"show {text!r}", seconds)
        return self.screen()
