"""askcards domain model, by domain (one module each). Fields, choices, constraints; behaviour
lives in services. Every model is importable from ``askcards.models`` itself."""

from .fields import EncryptedTextField, new_ask_id, new_out_track_id, new_session_id
from .agents import Agent, AgentRateBucket, Bot
from .sessions import ProgressCard, ProgressCardQuerySet, Session
from .asks import Ask, AskEvent, CardMessage, Respondent
from .records import CallbackReceipt, OutboxEvent, PanelPresence, PrunedTally

__all__ = ["EncryptedTextField", "new_ask_id", "new_out_track_id", "new_session_id", "Agent", "AgentRateBucket", "Bot", "ProgressCard", "ProgressCardQuerySet", "Session", "Ask", "AskEvent", "CardMessage", "Respondent", "CallbackReceipt", "OutboxEvent", "PanelPresence", "PrunedTally"]
