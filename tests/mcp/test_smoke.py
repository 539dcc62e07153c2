"""The shortest path through MCP: a blocking call answered on alice's panel, in both eras."""
from __future__ import annotations

import asyncio
import json

import pytest

from tests.mcp import support


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_blocking_call_answered_on_the_panel(tmp_path, mode):
    async def scenario(base, key):
        cookie = await asyncio.to_thread(support.login_cookie, base)
        async with support.Panel.open(base, cookie) as panel, support.client(base, key, mode=mode) as mcp:
            listed = await mcp.list_tools()
            assert [tool.name for tool in listed.tools] == ["ask_user_questions"]
            call = asyncio.create_task(mcp.call_tool("ask_user_questions", {"questions": support.QUESTIONS}))
            shown = await panel.next_ask()
            assert (await panel.answer(shown["requestId"], labels=["SQLite"]))["ok"] is True
            result = await asyncio.wait_for(call, support.TIMEOUT)
        assert result.is_error is False
        assert json.loads(result.content[0].text) == {
            "answers": [{"question": "Which database should we use?", "selectedLabels": ["SQLite"], "customInput": None}]
        }
        assert result.structured_content["ask"]["id"] == shown["requestId"]

    with support.seeded(tmp_path) as (base, seed):
        asyncio.run(scenario(base, seed["key"]))
