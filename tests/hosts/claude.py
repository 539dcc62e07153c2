"""The real Claude Code CLI, pinned in tests/hosts/package.json, run offline against a fake API.

- ``binary()``: the native ``claude`` binary, installed with ``npm ci --prefix tests/hosts`` when
  tests/hosts/node_modules lacks it (``tests.npm.ci``: bounded, one install at a time across test
  workers). A test
  calls it first: it skips (fails under ASKCARDS_REQUIRE_SERVICES=1) when npm is missing or the
  install fails, through ``tests.conftest.require``.
- ``Host(tmp, api, settings=..., env=...)``: a project dir ``tmp/project`` (its
  ``.claude/settings.json`` = ``settings``) and a HOME ``tmp/home`` whose ``.claude.json`` marks
  onboarding done, the project trusted and the fake API key approved. The CLI gets a clean
  environment: PATH, HOME, the fake API's URL and key, no nonessential traffic, plus ``env``.
- ``Host.run_print(prompt, ...)``: ``claude -p PROMPT --permission-mode default --output-format
  json``, bounded, returning a ``Run`` (exit code, stdout, stderr, parsed output).
- ``Host.interactive(...)``: the full-screen CLI in tmux (a private tmux server), with
  ``wait_ready()``, ``submit(prompt)``, ``wait_for(text)``, ``answer(key, dialog)``,
  ``type(text)``, ``press(*keys)``, ``screen()``; ended when the ``with`` block ends.
- ``Host.mcp_config(config)``: the ``--mcp-config`` arguments for e.g. ``McpServer.config()``;
  ``Host.run(args)``: any other subcommand (``["mcp", "add", ...]``).
- ``http_hooks({...})``: the ``hooks`` settings for ``"type": "http"`` hooks.

The native binary needs no Node at run time; the npm package asks for Node >= 22 in ``engines``
only for its postinstall, which copies the same binary over a placeholder. We install with
``--ignore-scripts`` (Node 20 here) and run the platform package's binary directly.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import shlex
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from tests import npm
from tests.hosts.fake_anthropic import FakeAnthropic

HERE = Path(__file__).resolve().parent
PACKAGE = "@anthropic-ai/claude-code"
VERSION: str = json.loads((HERE / "package.json").read_text())["dependencies"][PACKAGE]
INSTALL_TIMEOUT = 300  # seconds for npm ci (a ~230 MB download)
API_KEY = "sk-ant-api03-askcards-fake-key-0000000000"
RUN_TIMEOUT = 60


def _platform_package() -> str:
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(), platform.machine())
    system = platform.system().lower()
    musl = system == "linux" and any(Path("/lib").glob("ld-musl-*"))
    return f"{PACKAGE}-{system}-{machine}{'-musl' if musl else ''}"


def binary_path() -> Path:
    return HERE / "node_modules" / _platform_package() / "claude"


def _version_of(path: Path) -> str | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
                                  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.strip() else None


@functools.cache
def install() -> tuple[Path | None, str]:
    """(the binary, "") once it is installed at the pinned version, else (None, why not); tried
    once per process."""
    path = binary_path()
    why = npm.ci(HERE, lambda: path.exists() and _version_of(path) == VERSION, what=f"{PACKAGE}@{VERSION}",
                 timeout=INSTALL_TIMEOUT)
    if why:
        return None, why
    if not path.exists():
        return None, f"npm ci --prefix tests/hosts installed no {path.relative_to(HERE)} (platform {_platform_package()})"
    version = _version_of(path)
    if version != VERSION:
        return None, f"{path.relative_to(HERE)} reports version {version!r}, not the pinned {VERSION}"
    return path, ""


def binary() -> Path:
    """The pinned native ``claude`` binary; skips the test (fails under CI) when it cannot be had."""
    path, why = install()
    if path is None:
        from tests.conftest import require  # imported only here: scripts use the harness without Django

        require(False, why or "the Claude Code CLI could not be installed")
    assert path is not None
    return path


def tmux_available() -> bool:
    return shutil.which("tmux") is not None


def http_hook(url: str, *, headers: Mapping[str, str] | None = None, allowed_env_vars: Sequence[str] | None = None,
              timeout: float | None = None) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "http", "url": url}
    if headers:
        hook["headers"] = dict(headers)
    if allowed_env_vars:
        hook["allowedEnvVars"] = list(allowed_env_vars)
    if timeout is not None:
        hook["timeout"] = timeout
    return hook


def http_hooks(events: Mapping[str, dict[str, Any]], matcher: str | None = "*") -> dict[str, Any]:
    """``{"hooks": {EVENT: [{"matcher": ..., "hooks": [hook]}]}}`` for each event's hook. Events
    without matchers (Stop, UserPromptSubmit, ...) ignore ``matcher``."""
    no_matcher = {"Stop", "SubagentStop", "UserPromptSubmit", "SessionStart", "SessionEnd", "PreCompact"}
    settings: dict[str, Any] = {}
    for event, hook in events.items():
        group: dict[str, Any] = {"hooks": [hook]}
        if matcher is not None and event not in no_matcher:
            group["matcher"] = matcher
        settings[event] = [group]
    return {"hooks": settings}


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    project: Path
    home: Path
    seconds: float

    def output(self) -> Any:
        """``--output-format json``: the result object; ``stream-json``: the list of events."""
        text = self.stdout.strip()
        try:
            return json.loads(text)
        except ValueError:
            return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]

    @property
    def result(self) -> str:
        out = self.output()
        if isinstance(out, list):
            out = next((e for e in reversed(out) if e.get("type") == "result"), {})
        return out.get("result", "")


@dataclass
class Host:
    """One project + HOME the CLI runs in, against ``api`` (a started ``FakeAnthropic``)."""

    tmp: Path
    api: FakeAnthropic
    settings: dict[str, Any] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    claude: Path | None = None  # the binary; default binary() (which skips the test without it)
    project: Path = field(init=False)
    home: Path = field(init=False)

    def __post_init__(self) -> None:
        self.project = (Path(self.tmp) / "project").resolve()
        self.home = (Path(self.tmp) / "home").resolve()
        (self.project / ".claude").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        if self.settings is not None:
            self.write_settings(self.settings)
        state = {
            "hasCompletedOnboarding": True,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [API_KEY.strip()[-20:]], "rejected": []},
            "projects": {str(self.project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
        }
        (self.home / ".claude.json").write_text(json.dumps(state))

    def write_settings(self, settings: dict[str, Any]) -> None:
        (self.project / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
            "ANTHROPIC_BASE_URL": self.api.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        env.update(self.env)
        return env

    def command(self, args: Sequence[str], permission_mode: str | None) -> list[str]:
        cmd = [str(self.claude or binary())]
        if permission_mode is not None:
            cmd += ["--permission-mode", permission_mode]
        return cmd + list(args)

    def mcp_config(self, config: Mapping[str, Any]) -> list[str]:
        """Write an ``--mcp-config`` file (e.g. ``McpServer.config()``); the CLI arguments naming it."""
        path = Path(self.tmp) / "mcp.json"
        path.write_text(json.dumps(config))
        return ["--mcp-config", str(path)]

    def run(self, args: Sequence[str], *, timeout: float = RUN_TIMEOUT) -> Run:
        """Any ``claude`` subcommand in the project (``["mcp", "add", ...]``), bounded."""
        return self._run(self.command(args, None), timeout)

    def _run(self, cmd: list[str], timeout: float) -> Run:
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=self.project, env=self.environment(), capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{' '.join(cmd[1:3])} did not finish within {timeout} s; stdout: {exc.stdout!r} stderr: {exc.stderr!r}") from None
        return Run(done.returncode, done.stdout, done.stderr, self.project, self.home, time.monotonic() - started)

    def run_print(self, prompt: str, *, args: Sequence[str] = (), permission_mode: str | None = "default",
                  output_format: str = "json", timeout: float = RUN_TIMEOUT) -> Run:
        """``claude -p PROMPT`` in the project; raises AssertionError past ``timeout`` seconds."""
        verbose = ["--verbose"] if output_format == "stream-json" else []  # the CLI requires it there
        return self._run(self.command(["-p", prompt, "--output-format", output_format, *verbose, *args], permission_mode), timeout)

    @contextlib.contextmanager
    def interactive(self, *, args: Sequence[str] = (), permission_mode: str | None = "default",
                    width: int = 200, height: int = 50) -> Iterator["Interactive"]:
        """The full-screen CLI in a private tmux server, ended when the block ends."""
        if not tmux_available():
            from tests.conftest import require

            require(False, "tmux is not installed (apt-get install tmux)")
        session = Interactive(self.command(args, permission_mode), self.project, self.environment(), width, height)
        try:
            session.start()
            yield session
        finally:
            session.close()


class Interactive:
    """``claude`` in tmux: read the screen, type, press keys. Every wait is bounded."""

    def __init__(self, cmd: Sequence[str], cwd: Path, env: Mapping[str, str], width: int, height: int):
        self.socket = f"askcards-claude-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.cmd, self.cwd, self.env, self.width, self.height = list(cmd), cwd, dict(env), width, height
        self.pane_pid: int | None = None
        self.socket_path = ""

    def _tmux(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True, timeout=15)
        if check and done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        line = "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items()) + " " + shlex.join(self.cmd)
        self._tmux("new-session", "-d", "-s", "claude", "-x", str(self.width), "-y", str(self.height), "-c", str(self.cwd), line)
        self._tmux("set-option", "-t", "claude", "remain-on-exit", "on", check=False)
        self.pane_pid = int(self._tmux("display-message", "-p", "-t", "claude", "#{pane_pid}").strip())
        self.socket_path = self._tmux("display-message", "-p", "#{socket_path}").strip()

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "claude", check=False)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The screen once it shows ``text``; AssertionError with the screen past ``timeout``."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"the screen did not show {text!r} within {timeout} s:\n{screen}")

    def wait_ready(self, timeout: float = 30) -> str:
        """The screen once the prompt box is up (its footer names the permission mode)."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if "for shortcuts" in screen or "shift+tab to cycle" in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"the CLI showed no prompt within {timeout} s:\n{screen}")

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "claude", "-l", text)

    def press(self, *keys: str) -> None:
        """tmux key names: Enter, Escape, Up, Down, Tab, C-c, ..."""
        for key in keys:
            self._tmux("send-keys", "-t", "claude", key)

    def answer(self, key: str, dialog: str, timeout: float = 15) -> str:
        """Press ``key`` in a dialog that shows ``dialog`` (e.g. "Do you want to proceed?") until it
        goes: a dialog that has just opened ignores keys for a moment. The screen after."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.press(key)
            settle = time.monotonic() + 1.0
            while time.monotonic() < settle:
                screen = self.screen()
                if dialog not in screen:
                    return screen
                time.sleep(0.1)
        raise AssertionError(f"{key} did not close the dialog {dialog!r} within {timeout} s:\n{self.screen()}")

    def submit(self, prompt: str) -> None:
        """Type a prompt and send it (Enter a moment later, as a paste would otherwise swallow it)."""
        self.type(prompt)
        time.sleep(0.5)
        self.press("Enter")

    def close(self) -> None:
        self._tmux("kill-server", check=False)
        if self.socket_path:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
        if self.pane_pid is not None:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    os.kill(self.pane_pid, 0)
                except OSError:
                    return
                time.sleep(0.1)
            with contextlib.suppress(OSError):
                os.kill(self.pane_pid, 9)
