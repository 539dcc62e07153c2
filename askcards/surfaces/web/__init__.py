"""The web panel surface: asks pushed live to a logged-in user's browser over ``/ws/panel/``.

Presence is kept in the database (one row per connected socket, refreshed by a heartbeat, stale
after ``PanelPresence.TTL``), so every process agrees on whether a panel is connected — it decides
``no_surface``. Pushes go to the user's key in the hub (``askcards.wake.hub``), in every process.

Its parts: ``presence`` (who has a panel open), ``messages`` (what a socket is sent), ``panel`` (a
socket's view and its catching up with the database), ``surface`` (``WebSurface``).
"""
from .messages import (HISTORY_ANSWER_CHARS, INVALID, PLATFORM_NAMES, RESPONDED, ask_message, cancelled_message,
                       history_add, history_item, more_message, page_size, refusal_error, respondent_state,
                       responded_message, session_label)
from .panel import (MAX_KNOWN, PANEL_FILL_SLACK, PANEL_PAGE_BYTES, CatchUp, PanelSocket, PanelView, Snapshot,
                    panel_fill, panel_snapshot, panels_catch_up)
from .presence import (HEARTBEAT_SECONDS, PUSH_GRACE_SECONDS, is_present, panel_key, presence_drop,
                       presence_purge_stale, presence_refresh, presence_touch)
from .surface import WebSurface

__all__ = [
    "HEARTBEAT_SECONDS", "HISTORY_ANSWER_CHARS", "INVALID", "MAX_KNOWN", "PANEL_FILL_SLACK", "PANEL_PAGE_BYTES",
    "PLATFORM_NAMES", "PUSH_GRACE_SECONDS", "RESPONDED", "CatchUp", "PanelSocket", "PanelView", "Snapshot",
    "WebSurface", "ask_message", "cancelled_message", "history_add", "history_item", "is_present", "more_message",
    "page_size", "panel_fill", "panel_key", "panel_snapshot", "panels_catch_up", "presence_drop",
    "presence_purge_stale", "presence_refresh", "presence_touch", "refusal_error", "respondent_state",
    "responded_message", "session_label",
]
