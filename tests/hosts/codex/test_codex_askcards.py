"""The real Codex CLI (interactive, in tmux) with the documented ``curl`` hook pointed at a real askcards
``serve``: its permission prompt is asked on alice's web panel, and her answer decides."""
from __future__ import annotations

import shutil

import pytest

from tests.conftest import require
from tests.hosts.people import WEB_SESSION, askcards

from .fake_responses import FakeResponsesAPI, message, shell_call
from .harness import CodexTUI, curl_hook_command, require_codex

COMMAND = "touch marker"
FINAL = "The marker task is finished."


@pytest.fixture(autouse=True)
def codex_installed():
    require_codex()
    require(shutil.which("curl") is not None, "curl is missing (the documented Codex hook forwards with curl)")


def _script():
    return [shell_call(COMMAND, "call_marker", escalated=True, justification="Create the marker"), message(FINAL)]


def test_allowed_on_the_panel_the_command_runs(tmp_path):
    with askcards(tmp_path / "askcards") as (base, key, alice):
        alice.answers([["允许"]])
        hook = curl_hook_command(f"{base}/hooks/codex?{WEB_SESSION}&timeout=55", key, max_time=55)
        with FakeResponsesAPI(_script()) as api, CodexTUI(tmp_path, api, hook, prompt="make a marker",
                                                           hook_timeout=60) as codex:
            codex.wait_for_screen(FINAL, seconds=60)
        [shown] = alice.shown
    assert "Codex" in shown["questions"][0]["question"] and COMMAND in shown["questions"][0]["question"]
    assert (codex.workdir / "marker").exists()


def test_denied_on_the_panel_it_does_not_run_and_the_model_reads_why(tmp_path):
    with askcards(tmp_path / "askcards") as (base, key, alice):
        alice.answers([["拒绝"]], custom="不要在这里建文件")
        hook = curl_hook_command(f"{base}/hooks/codex?{WEB_SESSION}&timeout=55", key, max_time=55)
        with FakeResponsesAPI(_script()) as api, CodexTUI(tmp_path, api, hook, prompt="make a marker",
                                                           hook_timeout=60) as codex:
            codex.wait_for_screen(FINAL, seconds=60)
    assert not (codex.workdir / "marker").exists()
    [output] = api.function_outputs("call_marker")
    assert "不要在这里建文件" in output
