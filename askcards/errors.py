"""Domain errors with stable codes; the API renders them as {"error": {"code", "message"}}."""
from __future__ import annotations


class AskcardsError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(AskcardsError):
    code = "invalid_input"
    status = 400


class Unauthenticated(AskcardsError):
    """No valid agent key (HTTP 401). ``code``: not_authenticated (no header), invalid_key or
    agent_inactive."""

    code = "not_authenticated"
    status = 401

    def __init__(self, message: str, code: str = "not_authenticated"):
        super().__init__(message)
        self.code = code


class NotFound(AskcardsError):
    code = "not_found"
    status = 404


class UnknownTool(AskcardsError):
    code = "unknown_tool"
    status = 400


class AskNotPending(AskcardsError):
    code = "ask_not_pending"
    status = 409


class WebUserNotGranted(AskcardsError):
    """A session names a web user its agent was not granted (or no such user exists: the two are
    one answer, so an agent cannot probe for usernames)."""

    code = "web_user_not_granted"
    status = 403


class BotNotGranted(AskcardsError):
    """A session names a bot its agent was not granted (or no such active bot exists: one answer,
    so an agent cannot probe for the apps an operator has set up)."""

    code = "bot_not_granted"
    status = 403


class QuotaExceeded(AskcardsError):
    """One of the agent's quotas is used up (``services.quotas``): HTTP 429, with ``retry_after``
    seconds for the ``Retry-After`` header. ``quota`` names it: pending_asks,
    pending_per_respondent, parked_waits or asks_per_minute."""

    code = "quota_exceeded"
    status = 429

    def __init__(self, message: str, *, quota: str, retry_after: int):
        super().__init__(message)
        self.quota, self.retry_after = quota, retry_after


class CallbackRefused(AskcardsError):
    """A platform callback refused before its effect: ``status`` is the HTTP status to answer,
    ``cause`` the refusal's label on /metrics."""

    code = "callback_refused"

    def __init__(self, message: str, *, status: int, cause: str):
        super().__init__(message)
        self.status, self.cause = status, cause


class BotSecretsUnreadable(AskcardsError):
    """A bot's stored secrets cannot be decrypted with the current ASKCARDS_SECRET_KEY: its
    callbacks are refused until the operator restores the key or re-enters the secrets."""

    code = "bot_secrets_unreadable"
    status = 503
