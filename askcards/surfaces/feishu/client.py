"""A thin Feishu / Lark OpenAPI client on ``requests`` (SPEC §2: no lark-oapi; reference §3).

Three calls — send, reply, PATCH a card — plus the tenant token they need. Every response's
``code`` is checked; throttling (HTTP 429, codes 99991400 / 230020), 5xx, connection errors and
timeouts are retried with bounded exponential backoff that honours ``x-ogw-ratelimit-reset``
(``surfaces.http.call_with_retries``); an expired or missing token (99991663 / 99991661) is
refreshed once. Nothing secret — app secret, tenant token, card or answer content — is ever
logged or put into an error message.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import requests

from askcards.http import jsonlimits
from askcards.surfaces.http import PlatformError, RetryPolicy, TokenCache, call_with_retries, http_session

from .cards import dumps_card

logger = logging.getLogger(__name__)

FEISHU_BASE_URL = "https://open.feishu.cn"
LARK_BASE_URL = "https://open.larksuite.com"

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/open-apis/im/v1/messages"

# Feishu hands out a new token once fewer than 30 minutes remain and keeps the old one valid until
# it expires; refreshing 20 minutes early never uses a token in its last minutes.
TOKEN_SAFETY_MARGIN = 20 * 60
TOKEN_ERRORS = frozenset({99991661, 99991663})
THROTTLE_CODES = frozenset({99991400, 230020})
RECEIVE_ID_TYPES = frozenset({"open_id", "union_id", "user_id", "email", "chat_id"})
UUID_MAX_LENGTH = 50


class FeishuError(PlatformError):
    """A Feishu call failed, with Feishu's ``code`` and ``msg`` and the HTTP status when it answered."""

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        msg: str = "",
        http_status: int | None = None,
        permanent: bool = True,
        retry_after: float | None = None,
        token_rejected: bool = False,
    ):
        super().__init__(message, permanent=permanent, retry_after=retry_after, token_rejected=token_rejected)
        self.code = code
        self.msg = msg
        self.http_status = http_status

    @property
    def retryable(self) -> bool:
        return not self.permanent


@dataclass(frozen=True)
class SentMessage:
    message_id: str
    chat_id: str = ""


def _float_header(headers: Mapping[str, str], name: str) -> float | None:
    try:
        value = float(headers.get(name, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


class FeishuClient:
    """One Feishu app (bot) on one base URL. Cheap to create; the token lives in the Django cache."""

    def __init__(
        self,
        app_id: str,
        app_secret: str,
        base_url: str = FEISHU_BASE_URL,
        *,
        timeout: float | tuple[float, float] = (3.05, 10.0),
        max_attempts: int = 4,
        max_retry_seconds: float = 10.0,
        backoff: float = 0.5,
        max_backoff: float = 4.0,
        sleep: Callable[[float], Any] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        session: requests.Session | None = None,
    ):
        self.app_id = app_id
        self._app_secret = app_secret
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = RetryPolicy(max_attempts=max_attempts, backoff=backoff, max_backoff=max_backoff,
                                 max_retry_seconds=max_retry_seconds, sleep=sleep, clock=clock)
        self._session = session or http_session(self.base_url)
        digest = hashlib.sha256(f"{self.base_url}|{app_id}".encode()).hexdigest()[:32]
        self._token = TokenCache(f"askcards:feishu:tenant_token:{digest}", f"Feishu app {app_id}", clock)

    def __repr__(self) -> str:  # never shows the secret
        return f"FeishuClient(app_id={self.app_id!r}, base_url={self.base_url!r})"

    @property
    def max_attempts(self) -> int:
        return self.retry.max_attempts

    @max_attempts.setter
    def max_attempts(self, value: int) -> None:
        self.retry = replace(self.retry, max_attempts=value)

    # --- tenant token -------------------------------------------------------------------------

    def tenant_token(self) -> str:
        """The cached tenant access token, fetched when absent or within the safety margin of expiry
        (while the cache is down: this process's copy, fetched when it has none)."""
        return self._token.get() or self.fetch_token()

    def fetch_token(self) -> str:
        """A new tenant access token from Feishu (never the cached one), then cached; raises
        ``FeishuError`` when Feishu refuses the app id or secret or cannot be reached."""
        body = self._call("POST", TOKEN_PATH, {"app_id": self.app_id, "app_secret": self._app_secret}, auth=False)
        token, expire = body.get("tenant_access_token"), body.get("expire")
        if not isinstance(token, str) or not token or isinstance(expire, bool) or not isinstance(expire, (int, float)):
            raise FeishuError(f"Feishu token response for app {self.app_id} has no token or expiry")
        expire = int(expire)
        if expire > TOKEN_SAFETY_MARGIN:
            self._token.set(token, expire - TOKEN_SAFETY_MARGIN)
        logger.info("feishu tenant token fetched for app %s (expires in %s s)", self.app_id, expire)
        return token

    def forget_token(self) -> None:
        self._token.delete()

    # --- messages -----------------------------------------------------------------------------

    def send_card(self, receive_id_type: str, receive_id: str, card: Mapping[str, Any], uuid: str) -> SentMessage:
        """Send an interactive card; the same ``uuid`` within an hour sends at most one message."""
        if receive_id_type not in RECEIVE_ID_TYPES:
            raise ValueError(f"receive_id_type must be one of {sorted(RECEIVE_ID_TYPES)}, not {receive_id_type!r}")
        if not receive_id:
            raise ValueError("receive_id must not be empty")
        body = {"receive_id": receive_id, "msg_type": "interactive", "content": dumps_card(card),
                "uuid": self._check_uuid(uuid)}
        path = f"{MESSAGES_PATH}?receive_id_type={receive_id_type}"
        return self._sent(self._call("POST", path, body), path)

    def reply_card(self, message_id: str, card: Mapping[str, Any], uuid: str, *,
                   reply_in_thread: bool = False) -> SentMessage:
        """Reply to ``message_id`` with an interactive card (idempotent by ``uuid`` like send)."""
        body = {"msg_type": "interactive", "content": dumps_card(card), "uuid": self._check_uuid(uuid),
                "reply_in_thread": reply_in_thread}
        path = f"{MESSAGES_PATH}/{self._message_path(message_id)}/reply"
        return self._sent(self._call("POST", path, body), path)

    def patch_card(self, message_id: str, card: Mapping[str, Any]) -> None:
        """Replace the whole card of a message this bot sent (both cards need update_multi: true)."""
        self._call("PATCH", f"{MESSAGES_PATH}/{self._message_path(message_id)}", {"content": dumps_card(card)})

    @staticmethod
    def _check_uuid(uuid: str) -> str:
        if not uuid or len(uuid) > UUID_MAX_LENGTH:
            raise ValueError(f"uuid must be 1-{UUID_MAX_LENGTH} characters (Feishu dedupes sends by it for 1 h)")
        return uuid

    @staticmethod
    def _message_path(message_id: str) -> str:
        if not message_id:
            raise ValueError("message_id must not be empty")
        return quote(message_id, safe="")

    @staticmethod
    def _sent(body: dict[str, Any], path: str) -> SentMessage:
        data = body.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("message_id"), str):
            raise FeishuError(f"Feishu POST {path} answered without data.message_id")
        return SentMessage(message_id=data["message_id"], chat_id=str(data.get("chat_id") or ""))

    # --- transport ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any], *, auth: bool = True) -> dict[str, Any]:
        """One API call with retries; returns the response body (code 0) or raises ``FeishuError``."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")

        def send(token: str | None) -> dict[str, Any]:
            headers = {"Content-Type": "application/json; charset=utf-8"}
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            try:
                response = self._session.request(
                    method, self.base_url + path, data=data, headers=headers, timeout=self.timeout
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                raise FeishuError(f"Feishu {method} {_route(path)} failed: {type(exc).__name__}", permanent=False) from None
            parsed = _json_body(response)
            if response.status_code < 400 and parsed is not None and parsed.get("code") == 0:
                return parsed
            raise _response_error(method, path, response, parsed)

        if not auth:
            return call_with_retries(send, self.retry)
        return call_with_retries(send, self.retry, token=self.tenant_token, forget_token=self.forget_token)


def _route(path: str) -> str:
    return path.split("?", 1)[0]


def _json_body(response: requests.Response) -> dict[str, Any] | None:
    try:
        parsed = jsonlimits.load(response.content, what="Feishu's answer")
    except jsonlimits.JSONRefused:
        return None
    return parsed if isinstance(parsed, dict) else None


def _response_error(method: str, path: str, response: requests.Response, parsed: dict[str, Any] | None) -> FeishuError:
    status = response.status_code
    code = parsed.get("code") if parsed is not None else None
    code = code if isinstance(code, int) else None
    msg = str(parsed.get("msg", ""))[:200] if parsed is not None else ""
    retryable = status == 429 or status >= 500 or code in THROTTLE_CODES
    detail = f"code {code} ({msg})" if code is not None else "no JSON code"
    return FeishuError(
        f"Feishu {method} {_route(path)} failed: HTTP {status}, {detail}",
        code=code, msg=msg, http_status=status, permanent=not retryable,
        retry_after=_float_header(response.headers, "x-ogw-ratelimit-reset") if retryable else None,
        token_rejected=code in TOKEN_ERRORS,
    )
