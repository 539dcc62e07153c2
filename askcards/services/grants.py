"""Bot grants, checked where something new would go out through a bot: a session naming it, a new
ask (``tool_calls``), a new Feishu progress card (``feishu_progress``). What was sent before a
revoke is left alone: updating it is not a new message to anyone."""
from __future__ import annotations

import shlex

from askcards import selectors
from askcards.errors import BotNotGranted
from askcards.models import Agent, Session


def session_check_bot(*, agent: Agent, session: Session) -> None:
    """Raise BotNotGranted when the session's bot is no longer granted to its agent (revoked after
    the session was made): new asks and new cards are refused; what was already sent stays."""
    if session.bot_id is not None and not selectors.bot_granted(agent_id=agent.pk, bot_id=session.bot_id):
        raise bot_not_granted(agent, session.bot.app_id if session.bot else str(session.bot_id))


def bot_not_granted(agent: Agent, app_id: str) -> BotNotGranted:
    """The refusal, naming the command an operator grants the bot with."""
    command = shlex.join(["python", "manage.py", "askcards_agent", "grant", agent.name, "--bot", app_id])
    return BotNotGranted(
        f"agent {agent.name!r} may not use bot {app_id!r}: it was not granted that bot (or no active bot has "
        f"that id). An operator grants it with `{command}` (or on the agent's admin page)."
    )
