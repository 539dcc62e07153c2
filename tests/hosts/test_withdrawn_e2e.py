"""A host that stops waiting, against a real ``serve``: its hook request (a real HTTP request, as
Claude Code's http hook and Codex's curl send it) closes while the prompt is on a DingTalk card,
and the fake DingTalk server records the card's update withdrawing it with the reason in words.
(The Feishu card, with the real Claude Code CLI giving up: tests/hosts/test_claude_code_askcards.py.)"""
from __future__ import annotations

import json

from tests import serving
from tests.hosts.test_claude_code_askcards import DINGTALK_SEED

WAIT = 30
EVENT = {"session_id": "019a-codex", "turn_id": "019a-turn", "cwd": "/home/alice/shop",
         "hook_event_name": "PermissionRequest", "tool_name": "Bash",
         "tool_input": {"command": "make deploy", "description": "deploy"}}


def test_a_codex_prompt_whose_hook_request_closes_leaves_the_dingtalk_card_saying_why(tmp_path):
    from tests.fakes.dingtalk import FakeDingTalk

    with FakeDingTalk() as fake:
        env = serving.service_env(tmp_path / "askcards")
        serving.manage(env, "migrate", "-v0")
        seed = serving.shell_json(env, DINGTALK_SEED.format(app_id=fake.client_id, secret=fake.client_secret,
                                                            base_url=fake.base_url))
        with serving.serve(env) as base:
            serving.manage(env, "askcards_dingtalk_register", "--client-id", fake.client_id,
                           "--url", f"{base}/callbacks/dingtalk/{fake.client_id}/")
            body = json.dumps(EVENT).encode()
            host = serving.raw_connection(base)
            host.sendall(
                f"POST /hooks/codex?session=dingtalk%2Fdm%2Fstaff_a&platform=dingtalk&chat_type=p2p&user_id=staff_a"
                f"&bot={fake.client_id}&timeout=600 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Authorization: Bearer {seed['key']}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            card = serving.until(lambda: next(iter(fake.cards.values()), None), "the prompt's DingTalk card", WAIT)
            assert "make deploy" in json.dumps(card.create_body, ensure_ascii=False)
            assert card.params["card_status"] == "pending"
            host.close()  # Codex answered in its terminal, or its curl gave up

            serving.until(lambda: card.params.get("card_status") != "pending", "the card's withdrawal", WAIT)

    assert (card.params["card_status"], card.params["question_desc"], card.params["form_btn_text"]) == (
        "expired", "智能体已停止等待。", "已失效")
    assert card.updates and card.updates[-1]["question_desc"] == "智能体已停止等待。"
