"""Every write and lifecycle transition, by domain (SPEC §5).

- ``asks`` — the terminal-transition core: activation, answers, every ending, audit rows.
- ``tool_calls`` — one pipeline for every tool: validate → reserve → deliver → activate.
- ``sessions`` — upsert, grants, inbound messages, an agent's restart, a callback's receipt.
- ``feishu_progress`` — the Feishu progress card's runs and its cancel button.
- ``feishu`` — clicks on Feishu cards: an ask's form submitted, the progress card's cancel.
- ``dingtalk`` — the DingTalk tool's list/cancel actions and clicks on its cards (and on the panel).
- ``agents`` — agents, keys, grants, their event feed, and the platform bots.
- ``grants`` — the bot-grant check wherever something new would go out through a bot.
- ``hosts`` — agent hosts' prompts (Claude Code, Codex) as asks, and their decisions.
- ``host_app`` — the MCP App a host renders: the ask a tool call made, answered there.
- ``host_surface`` — the MCP client's own form (``host=ask``): its user's answer, decline or dismissal.
- ``retention`` — batched pruning of old audit rows, delivered outbox events and callback receipts.

Entry points import ``askcards.services`` and call the names below; the modules import one
another only downwards (``asks`` imports none of them).
"""
from .agents import (
    BOT_BASE_URLS,
    BotCheck,
    BotRemoval,
    agent_bot_grant,
    agent_bot_revoke,
    agent_bots_set,
    agent_create,
    agent_grant,
    agent_grants_set,
    agent_revoke,
    agent_rotate_key,
    agent_webhook_url_check,
    bot_add,
    bot_find,
    bot_get,
    bot_options_check,
    bot_remove,
    bot_test,
    bot_update,
    bot_update_check,
    bot_warnings,
    events_acknowledge,
    events_retry,
)
from .asks import (
    SYSTEM,
    AnswerOutcome,
    AnswerRefusal,
    ask_activate,
    ask_answer,
    ask_cancel,
    ask_click_rejected,
    ask_expire,
    ask_invalidate,
    ask_result_returned,
    ask_result_undeliverable,
    ask_results_delivered,
    expire_due,
    purge_answers,
)
from .dingtalk import (
    DINGTALK_SURFACE,
    ClickKind,
    ClickRefusal,
    ClickResult,
    PanelAnswer,
    PanelRefusal,
    dingtalk_callback,
    dingtalk_click,
    dingtalk_panel_answer,
)
from .grants import session_check_bot
from .feishu import feishu_callback
from .feishu_progress import card_delivery_failed, card_touch, progress_put, session_cancel_request
from .quotas import QUOTAS, agent_quotas_set, parked_wait, quota_check_ask, quota_check_parked, quota_limit
from .retention import CALLBACK_RECEIPT_TTL, PruneReport, asks_prune, audit_prune, outbox_prune, receipts_prune
from .sessions import (
    agent_recover,
    callback_receipt,
    infer_platform,
    session_bot,
    session_check_web_user,
    session_message,
    session_recover,
    session_upsert,
)
from .host_app import HOST_APP_SURFACE, host_app_answer, host_app_ask, host_app_view
from .host_surface import HOST_SURFACE, HostRefusal, HostResponse, host_ask, host_respond
from .hosts import NO_DECISION, host_left, host_progress, host_prompt, host_reply
from .waiters import (
    WAITER_REFRESH_SECONDS,
    caller_left,
    caller_polled,
    waiter_parked,
    waiters_alive,
    waits_lapsed,
)
from .tool_calls import DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS, ToolCallOutcome, tool_call

__all__ = [
    "BOT_BASE_URLS", "CALLBACK_RECEIPT_TTL", "DEFAULT_TIMEOUT_SECONDS", "DINGTALK_SURFACE", "MAX_TIMEOUT_SECONDS",
    "SYSTEM", "AnswerOutcome", "AnswerRefusal", "PruneReport", "asks_prune", "audit_prune", "outbox_prune", "receipts_prune", "ClickKind", "ClickRefusal", "ClickResult", "ToolCallOutcome", "agent_bot_grant", "agent_bot_revoke", "agent_bots_set", "agent_create", "agent_grant", "agent_grants_set",
    "agent_recover", "agent_revoke", "agent_rotate_key", "agent_webhook_url_check", "ask_activate", "ask_answer",
    "ask_cancel", "ask_click_rejected", "ask_expire", "ask_invalidate", "ask_result_returned",
    "ask_result_undeliverable", "ask_results_delivered", "bot_add", "bot_find", "bot_get", "bot_options_check", "bot_remove", "bot_test", "bot_update", "bot_update_check", "bot_warnings",
    "BotCheck", "BotRemoval", "callback_receipt", "card_delivery_failed", "card_touch",
    "dingtalk_callback", "feishu_callback", "dingtalk_click", "dingtalk_panel_answer", "PanelAnswer", "PanelRefusal",
    "events_acknowledge", "events_retry", "expire_due", "infer_platform", "progress_put", "purge_answers", "parked_wait", "quota_check_ask", "quota_check_parked", "QUOTAS", "agent_quotas_set", "quota_limit",
    "session_bot", "session_cancel_request", "session_check_bot", "session_check_web_user", "session_message", "session_recover",
    "session_upsert", "tool_call", "NO_DECISION", "host_progress", "host_left", "host_prompt", "host_reply",
    "HOST_APP_SURFACE", "host_app_answer", "host_app_ask", "host_app_view",
    "HOST_SURFACE", "HostRefusal", "HostResponse", "host_ask", "host_respond",
    "WAITER_REFRESH_SECONDS", "caller_left", "caller_polled", "waiter_parked", "waiters_alive", "waits_lapsed",
]
