"""Reads, split by job: who is calling (``auth``), the bot cache (``bots``), the shared reads
(``reads``), the public shapes of asks and events (``shapes``), counts for metrics and the admin
(``counts``) and the web panel's reads (``panel``). Nothing here writes.

Every public name is importable from ``askcards.selectors`` itself; the modules say which job a
name belongs to. A test that moves a module's state (the bot cache's clock) patches that module.
"""
from __future__ import annotations

from .rows import (
    unique_row,
)
from .auth import (
    BEARER,
    agent_for_authorization,
)
from .bots import (
    BOT_CACHE_SECONDS,
    active_bot,
    callback_bot,
    forget_active_bots,
)
from .reads import (
    ask_get,
    ask_list,
    ask_page,
    bot_granted,
    clicked_ask,
    clicked_progress_card,
    events_after,
    pending_asks_of_session,
    session_get,
    web_user_granted,
    with_respondents,
)
from .shapes import (
    AskOutput,
    AskTargetOutput,
    EventDataOutput,
    EventOutput,
    IsoDateTime,
    OutputSerializer,
    RespondentOutput,
    SessionRefOutput,
    ask_data,
    event_data,
)
from .counts import (
    COUNT_UP_TO,
    EXACT_COUNT_BELOW,
    changelist_count,
    metrics_answer_times,
    metrics_asks,
    metrics_card_sync,
    metrics_ignored_clicks,
    metrics_outbox,
    metrics_panel_sockets,
    metrics_pruned,
    metrics_responses,
)
from .panel import (
    PANEL_BEAT_CHUNK,
    PANEL_HISTORY_SIZE,
    panel_answerable,
    panel_ask,
    panel_asks,
    panel_asks_by_id,
    panel_history,
    panel_identity,
    panel_next,
    panel_pending,
    panel_pending_ids,
    panel_respondent,
    panel_waiting,
)

__all__ = [
    "AskOutput",
    "AskTargetOutput",
    "BEARER",
    "BOT_CACHE_SECONDS",
    "COUNT_UP_TO",
    "EXACT_COUNT_BELOW",
    "EventDataOutput",
    "EventOutput",
    "IsoDateTime",
    "OutputSerializer",
    "PANEL_BEAT_CHUNK",
    "PANEL_HISTORY_SIZE",
    "RespondentOutput",
    "SessionRefOutput",
    "active_bot",
    "agent_for_authorization",
    "ask_data",
    "ask_get",
    "ask_list",
    "ask_page",
    "bot_granted",
    "callback_bot",
    "changelist_count",
    "clicked_ask",
    "clicked_progress_card",
    "event_data",
    "events_after",
    "forget_active_bots",
    "metrics_answer_times",
    "metrics_asks",
    "metrics_card_sync",
    "metrics_ignored_clicks",
    "metrics_outbox",
    "metrics_panel_sockets",
    "metrics_pruned",
    "metrics_responses",
    "panel_answerable",
    "panel_ask",
    "panel_asks",
    "panel_asks_by_id",
    "panel_history",
    "panel_identity",
    "panel_next",
    "panel_pending",
    "panel_pending_ids",
    "panel_respondent",
    "panel_waiting",
    "pending_asks_of_session",
    "session_get",
    "unique_row",
    "web_user_granted",
    "with_respondents",
]
