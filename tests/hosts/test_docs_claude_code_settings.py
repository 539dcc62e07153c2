"""The documented Claude Code settings: the ``.claude/settings.json`` block of the agent hosts page
(docs/agents/hosts.md) names a hook for every event askcards handles, each pointed at
``/hooks/claude-code`` with the key from the environment, the prompts' timeouts long and the same
in the hook and its URL; the README's shorter block is a part of it, word for word.

``documented_settings`` is that block as the real-CLI tests (test_claude_code_askcards.py) run
it — only the address, the session and the timeout changed — so the page cannot drift from what
works."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from askcards.hosts import claude_code, views
from tests import serving

HOSTS_PAGE = serving.ROOT / "docs" / "agents" / "hosts.md"
README = serving.ROOT / "README.md"
DOCUMENTED_BASE = "http://127.0.0.1:8000"
DOCUMENTED_QUERY = "session=web%2Falice&platform=web&web_user=alice"
HOOK_PATH = "/hooks/claude-code"
# The prompts (a person answers them: long timeouts) and the events that only report progress.
PROMPTS = {claude_code.PERMISSION_REQUEST, claude_code.ELICITATION}
HANDLED = {*PROMPTS, *claude_code.TOOL_EVENTS, claude_code.STOP}
NO_MATCHER = {claude_code.STOP}  # Claude Code matches Stop on nothing


def _json_blocks(text: str) -> list[str]:
    return re.findall(r"```json\n(.*?)```", text, re.S)


def documented_block() -> str:
    """The settings JSON of the page's Claude Code section, as written."""
    text = HOSTS_PAGE.read_text()
    section = text[text.index("**Claude Code**"):text.index("**Codex**")]
    blocks = _json_blocks(section)
    assert len(blocks) == 1, f"the hosts page's Claude Code section has {len(blocks)} settings blocks, not one"
    return blocks[0]


def documented_settings(base: str, query: str, *, timeout: int | None = None,
                        events: Iterable[str] | None = None) -> dict[str, Any]:
    """The page's settings pointed at ``base`` and the session ``query`` (the URL fields, no
    ``timeout``); ``timeout`` replaces the prompts' (the hook's and the URL's alike); ``events``
    keeps only those hooks (None: every one). The key stays ``$ASKCARDS_KEY``, from the environment
    Claude Code runs in."""
    documented_url = f"{DOCUMENTED_BASE}{HOOK_PATH}?{DOCUMENTED_QUERY}"
    text = documented_block()
    assert documented_url in text, f"the hosts page's settings no longer use {documented_url}"
    settings = json.loads(text.replace(documented_url, f"{base}{HOOK_PATH}?{query}"))
    hooks = settings["hooks"]
    if events is not None:
        events = list(events)
        missing = set(events) - set(hooks)
        assert not missing, f"the hosts page's settings have no {sorted(missing)} hook"
        settings["hooks"] = hooks = {event: hooks[event] for event in events}
    for groups in hooks.values():
        for group in groups:
            for hook in group["hooks"]:
                assert hook["url"].startswith(f"{base}{HOOK_PATH}?{query}"), hook["url"]
                if timeout is not None and "timeout" in hook:
                    hook["url"] = re.sub(r"([?&]timeout=)\d+", rf"\g<1>{timeout}", hook["url"])
                    hook["timeout"] = timeout
    return settings


def _hook(settings: dict[str, Any], event: str) -> tuple[dict[str, Any], dict[str, Any]]:
    [group] = settings["hooks"][event]
    [hook] = group["hooks"]
    return group, hook


def test_the_pages_settings_name_every_hook_event_askcards_handles():
    settings = json.loads(documented_block())
    assert set(settings) == {"hooks"}
    assert set(settings["hooks"]) == HANDLED
    for event in HANDLED:
        group, hook = _hook(settings, event)
        assert group.get("matcher") == (None if event in NO_MATCHER else "*"), (event, group)
        assert hook["type"] == "http", event
        assert hook["headers"] == {"Authorization": "Bearer $ASKCARDS_KEY"}, event  # never the key itself
        assert hook["allowedEnvVars"] == ["ASKCARDS_KEY"], event
        url = urlsplit(hook["url"])
        assert f"{url.scheme}://{url.netloc}{url.path}" == f"{DOCUMENTED_BASE}{HOOK_PATH}", event
        fields = parse_qs(url.query)
        assert {k: v for k, v in fields.items() if k != "timeout"} == parse_qs(DOCUMENTED_QUERY), event
        if event in PROMPTS:
            # The same number in the hook and its URL (askcards gives up HOOK_MARGIN_SECONDS
            # before the host does), long enough for a person, and one the endpoint accepts.
            [url_timeout] = fields["timeout"]
            assert views.hook_timeout(url_timeout) == hook["timeout"], event
            assert hook["timeout"] >= views.DEFAULT_TIMEOUT_SECONDS, event
        else:
            assert "timeout" not in fields and "timeout" not in hook, event  # answered at once


def test_the_prompts_share_one_hook():
    settings = json.loads(documented_block())
    assert _hook(settings, claude_code.PERMISSION_REQUEST) == _hook(settings, claude_code.ELICITATION)


def test_the_readmes_settings_are_a_part_of_the_pages():
    """The README shows the permission hook alone, and says so; what it shows is the page's."""
    page = json.loads(documented_block())["hooks"]
    readme_text = README.read_text()
    blocks = _json_blocks(readme_text)
    assert len(blocks) <= 1
    for block in blocks:
        readme = json.loads(block)["hooks"]
        assert readme and set(readme) <= set(page)
        for event, groups in readme.items():
            assert groups == page[event], event
        if set(readme) != set(page):
            assert "(docs/agents/hosts.md)" in readme_text and "the permission hook alone" in readme_text


def test_documented_settings_point_at_the_test_server_and_keep_the_rest():
    settings = documented_settings("http://127.0.0.1:4321", "session=s&platform=web&web_user=bob", timeout=120,
                                   events=[claude_code.PERMISSION_REQUEST, claude_code.STOP])
    assert set(settings["hooks"]) == {claude_code.PERMISSION_REQUEST, claude_code.STOP}
    _, prompt = _hook(settings, claude_code.PERMISSION_REQUEST)
    _, stop = _hook(settings, claude_code.STOP)
    base = "http://127.0.0.1:4321/hooks/claude-code?session=s&platform=web&web_user=bob"
    assert (prompt["url"], prompt["timeout"]) == (f"{base}&timeout=120", 120)
    assert stop["url"] == base and "timeout" not in stop
    _, written = _hook(json.loads(documented_block()), claude_code.PERMISSION_REQUEST)
    assert {k: v for k, v in prompt.items() if k not in ("url", "timeout")} == \
        {k: v for k, v in written.items() if k not in ("url", "timeout")}
