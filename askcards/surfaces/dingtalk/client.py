"""A thin DingTalk OpenAPI client for form cards (platform facts: reference/dingtalk-platform.md §3).

Four calls: the app access token, ``createAndDeliver``, the card instance PUT and the HTTP callback
registration. Throttling (403 ``Forbidden.AccessDenied.Qps*``, 429), 5xx answers, timeouts and
connection errors are retried a bounded number of times (``surfaces.http.call_with_retries``);
anything else raises ``DingTalkError`` with DingTalk's code and message. Logs name the call, the
HTTP status and DingTalk's code, never a secret, a token, card data or an answer.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import requests

from askcards.http import jsonlimits
from askcards.surfaces.http import PlatformError, RetryPolicy, TokenCache, call_with_retries, http_session
from askcards.tools.dingtalk_ask_user_question import as_text

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.dingtalk.com"
TOKEN_PATH = "/v1.0/oauth2/accessToken"
CREATE_AND_DELIVER_PATH = "/v1.0/card/instances/createAndDeliver"
CARD_INSTANCES_PATH = "/v1.0/card/instances"
REGISTER_CALLBACK_PATH = "/v1.0/card/callbacks/register"
TOKEN_HEADER = "x-acs-dingtalk-access-token"

# A cached token is dropped this many seconds before DingTalk says it expires.
TOKEN_REFRESH_MARGIN = 60
# DingTalk's throttles are 403s, not 429s (platform §3.3); their window is one second.
QPS_LIMIT_CODES = frozenset(
    {
        "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi",
        "Forbidden.AccessDenied.QpsLimitForApi",
        "Forbidden.AccessDenied.QpmLimitForAppkeyAndApi",
    }
)
QPS_RETRY_SECONDS = 1.0
TOKEN_ERROR_CODES = frozenset({"InvalidAuthentication"})
CARD_ALREADY_EXISTS = "param.cardAlreadyExist"
MAX_OUT_TRACK_ID = 100
MAX_OPEN_SPACE_ID = 1000
# The reference plugin's message for a failed deliverResults entry without an errorMsg.
DELIVERY_FAILED_TEXT = "DingTalk question card delivery failed"


class DingTalkError(PlatformError):
    """A DingTalk call failed, with the HTTP status, DingTalk's code and request id when it answered."""

    def __init__(self, message: str, *, status: int | None = None, code: str = "", request_id: str = "",
                 permanent: bool = True, retry_after: float | None = None, token_rejected: bool = False,
                 detail: str = ""):
        super().__init__(message, permanent=permanent, retry_after=retry_after, token_rejected=token_rejected)
        self.detail = detail  # DingTalk's own error message, when it sent one
        self.status = status
        self.code = code
        self.request_id = request_id


class DeliveryError(DingTalkError):
    """createAndDeliver answered 200, but at least one ``deliverResults`` entry failed."""

    def __init__(self, message: str, *, failed: list[dict[str, Any]]):
        super().__init__(message, status=200, code="deliveryFailed")
        self.failed = failed


@dataclass(frozen=True)
class Delivery:
    out_track_id: str
    open_space_id: str
    # deliverResults as DingTalk returned them (empty when a retry found the card already created).
    results: list[dict[str, Any]]
    already_existed: bool = False


@dataclass(frozen=True)
class CallbackRegistration:
    route_key: str
    callback_url: str
    # DingTalk echoes the registered secret; None when it did not.
    secret_matches: bool | None


def card_param_map(values: dict[str, Any]) -> dict[str, str]:
    """Card variables as DingTalk wants them: always strings (see ``as_text``)."""
    return {str(key): as_text(value) for key, value in values.items()}


def open_space_id(space_kind: str, space_id: str) -> str:
    """``dtv1.card//IM_ROBOT.<userId>`` for a robot 1:1 chat, ``dtv1.card//IM_GROUP.<conversationId>``
    for a group. Raises DingTalkError for an id that would change the space (``;``, whitespace)."""
    if space_kind not in ("user", "group"):
        raise DingTalkError(f"space kind must be 'user' or 'group', got {space_kind!r}", code="invalid_request")
    if not isinstance(space_id, str) or not space_id or any(ch.isspace() or ch == ";" for ch in space_id):
        raise DingTalkError(
            f"a DingTalk {space_kind} id must be a non-empty raw id without whitespace or ';', got {space_id!r}",
            code="invalid_request",
        )
    value = f"dtv1.card//{'IM_ROBOT' if space_kind == 'user' else 'IM_GROUP'}.{space_id}"
    if len(value) > MAX_OPEN_SPACE_ID:
        raise DingTalkError(f"openSpaceId is longer than {MAX_OPEN_SPACE_ID} characters", code="invalid_request")
    return value


class DingTalkClient:
    """One DingTalk app (``client_id`` = AppKey = robotCode). Safe to share between threads."""

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout: float = 10.0,
        max_attempts: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 4.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        session: requests.Session | None = None,
    ):
        self.client_id = client_id
        self._client_secret = client_secret
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = RetryPolicy(max_attempts=max_attempts, backoff=backoff, max_backoff=max_backoff, sleep=sleep)
        self._http = session or http_session(self.base_url)
        digest = hashlib.sha256(f"{self.base_url}\n{self.client_id}".encode()).hexdigest()[:32]
        self._token = TokenCache(f"askcards:dingtalk:token:{digest}", f"DingTalk app {client_id}", clock)

    def __repr__(self) -> str:  # never the secret
        return f"DingTalkClient(client_id={self.client_id!r}, base_url={self.base_url!r})"

    @property
    def default_route_key(self) -> str:
        """An app-unique HTTP callback route key (platform §1.2 [rec])."""
        return f"askcards-{self.client_id}"

    # -- token -----------------------------------------------------------------------------

    def access_token(self) -> str:
        """The app access token, from the cache until 60 s before it expires (while the cache is
        down: this process's copy, fetched when it has none)."""
        return self._token.get() or self.fetch_token()

    def fetch_token(self) -> str:
        """A new app access token from DingTalk (never the cached one), then cached; raises
        ``DingTalkError`` when DingTalk refuses the client id or secret or cannot be reached."""
        body = self._call("POST", TOKEN_PATH, {"appKey": self.client_id, "appSecret": self._client_secret}, auth=False)
        token = body.get("accessToken") if isinstance(body, dict) else None
        expire_in = body.get("expireIn") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token or isinstance(expire_in, bool) or not isinstance(expire_in, int):
            raise DingTalkError("DingTalk access token response lacks accessToken/expireIn", code="invalidResponse")
        ttl = expire_in - TOKEN_REFRESH_MARGIN
        if ttl > 0:
            self._token.set(token, ttl)
        return token

    def forget_token(self) -> None:
        self._token.delete()

    # -- cards -----------------------------------------------------------------------------

    def create_and_deliver(
        self,
        *,
        out_track_id: str,
        template_id: str,
        card_data: dict[str, Any],
        space_kind: str,
        space_id: str,
        support_forward: bool = True,
        callback_route_key: str | None = None,
    ) -> Delivery:
        """Create a card and put it into a robot 1:1 chat (``space_kind="user"``, ``space_id`` = staffId)
        or a group (``"group"``, ``space_id`` = conversationId). Targeted cards pass
        ``support_forward=False``. With ``callback_route_key`` the card calls back over HTTP, else
        over Stream. Raises DeliveryError when any deliverResults entry failed, DingTalkError else."""
        if not out_track_id or len(out_track_id) > MAX_OUT_TRACK_ID:
            raise DingTalkError(f"outTrackId must be 1-{MAX_OUT_TRACK_ID} characters", code="invalid_request")
        if not template_id:
            raise DingTalkError("a card template id is required", code="invalid_request")
        space = open_space_id(space_kind, space_id)
        extension = {"dynamicSummary": "true"}
        body: dict[str, Any] = {
            "cardTemplateId": template_id,
            "outTrackId": out_track_id,
            "cardData": {"cardParamMap": card_param_map(card_data)},
            "callbackType": "HTTP" if callback_route_key else "STREAM",
            "imGroupOpenSpaceModel": {"supportForward": support_forward},
            "imRobotOpenSpaceModel": {"supportForward": support_forward},
            "openSpaceId": space,
            "userIdType": 1,
        }
        if callback_route_key:
            body["callbackRouteKey"] = callback_route_key
        if space_kind == "user":
            body["imRobotOpenDeliverModel"] = {
                "spaceType": "IM_ROBOT", "robotCode": self.client_id, "extension": extension,
            }
        else:
            body["imGroupOpenDeliverModel"] = {"robotCode": self.client_id, "extension": extension}

        response = self._call("POST", CREATE_AND_DELIVER_PATH, body, created_code=CARD_ALREADY_EXISTS)
        if response is None:
            # An earlier attempt timed out or got a 5xx, yet created the card: the retry's
            # "already exists" means it is there (a new outTrackId is made per ask).
            logger.warning("DingTalk card %s already existed on retry; treating it as delivered", out_track_id)
            return Delivery(out_track_id, space, [], already_existed=True)
        results = (response.get("result") or {}).get("deliverResults") if isinstance(response, dict) else None
        if not results:
            logger.warning("DingTalk createAndDeliver for card %s returned no deliverResults", out_track_id)
            return Delivery(out_track_id, space, [])
        if not isinstance(results, list):
            raise DingTalkError("DingTalk createAndDeliver returned malformed deliverResults", code="invalidResponse")
        failed = [entry for entry in results if not isinstance(entry, dict) or entry.get("success") is not True]
        if failed:
            raise DeliveryError(_describe_failed_deliveries(out_track_id, failed), failed=failed)
        return Delivery(out_track_id, space, results)

    def update_card(self, out_track_id: str, changed: dict[str, Any]) -> bool:
        """PUT only the changed card variables, merged by key. Returns False when there was nothing to send."""
        if not changed:
            return False
        body = {
            "outTrackId": out_track_id,
            "cardData": {"cardParamMap": card_param_map(changed)},
            "cardUpdateOptions": {"updateCardDataByKey": True},
        }
        self._call("PUT", CARD_INSTANCES_PATH, body)
        return True

    def register_callback(self, callback_url: str, api_secret: str, force_update: bool = False, *,
                          route_key: str | None = None) -> CallbackRegistration:
        """Bind the HTTP callback route key to ``callback_url``; DingTalk signs callbacks with ``api_secret``.

        Without ``force_update`` an existing registration is kept and returned as it is: compare
        ``callback_url`` / ``secret_matches`` to see whether it needs forcing."""
        route_key = route_key or self.default_route_key
        body: dict[str, Any] = {"callbackRouteKey": route_key, "callbackUrl": callback_url, "forceUpdate": force_update}
        if api_secret:
            body["apiSecret"] = api_secret
        response = self._call("POST", REGISTER_CALLBACK_PATH, body)
        result = response.get("result") if isinstance(response, dict) else None
        result = result if isinstance(result, dict) else {}
        echoed = result.get("apiSecret")
        matches = hmac.compare_digest(echoed.encode(), api_secret.encode()) if isinstance(echoed, str) else None
        return CallbackRegistration(route_key, str(result.get("callbackUrl") or callback_url), matches)

    # -- transport -------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any], *, auth: bool = True,
              created_code: str | None = None) -> Any:
        """One API call with bounded retries. Returns the decoded JSON body, or None when
        ``created_code`` came back after an attempt whose outcome is unknown (timeout, 5xx)."""
        outcome_unknown = False

        def send(token: str | None) -> Any:
            nonlocal outcome_unknown
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if token is not None:
                headers[TOKEN_HEADER] = token
            try:
                response = self._http.request(method, self.base_url + path, json=body, headers=headers,
                                              timeout=self.timeout)
            except (requests.Timeout, requests.ConnectionError) as exc:
                outcome_unknown = True
                raise DingTalkError(f"DingTalk {path} did not answer: {type(exc).__name__}", permanent=False) from None
            except requests.RequestException as exc:
                raise DingTalkError(f"DingTalk {path} request failed: {type(exc).__name__}") from exc
            if 200 <= response.status_code < 300:
                return _decode_success(response, path)
            error = _error_from(response, path)
            if created_code and outcome_unknown and error.code == created_code:
                return None
            if response.status_code >= 500:
                outcome_unknown = True
            raise error

        if not auth:
            return call_with_retries(send, self.retry)
        return call_with_retries(send, self.retry, token=self.access_token, forget_token=self.forget_token)


def _decode_success(response: requests.Response, path: str) -> Any:
    try:
        body = jsonlimits.load(response.content, what=f"DingTalk's answer to {path}")
    except jsonlimits.JSONRefused:
        raise DingTalkError(f"DingTalk {path} answered HTTP {response.status_code} without JSON",
                            status=response.status_code, code="invalidResponse") from None
    if isinstance(body, dict) and body.get("success") is False:
        raise DingTalkError(
            f"DingTalk {path} reported failure: {body.get('code') or '-'}: {body.get('message') or '-'}",
            status=response.status_code, code=str(body.get("code") or ""),
        )
    return body


def _error_from(response: requests.Response, path: str) -> DingTalkError:
    status = response.status_code
    code = message = request_id = ""
    try:
        body = jsonlimits.load(response.content, what=f"DingTalk's answer to {path}")
    except jsonlimits.JSONRefused:
        body = None
    if isinstance(body, dict):
        code = str(body.get("code") or "")
        message = str(body.get("message") or "")
        request_id = str(body.get("requestid") or body.get("requestId") or "")
    request_id = request_id or response.headers.get("x-acs-request-id", "")
    retryable = (
        (status == 403 and code in QPS_LIMIT_CODES)
        or status == 429
        # 5xx is DingTalk busy or its gateway timing out, except the param.* errors some
        # endpoints also send as 500 (callback register: param.callbackRouteKeyExist).
        or (status >= 500 and not code.startswith("param."))
    )
    text = f"DingTalk {path} failed: HTTP {status}"
    if code:
        text += f" {code}"
    if message:
        text += f": {message[:300]}"
    if request_id:
        text += f" (requestid {request_id})"
    return DingTalkError(
        text, status=status, code=code, request_id=request_id, permanent=not retryable,
        retry_after=QPS_RETRY_SECONDS if code in QPS_LIMIT_CODES else None,
        token_rejected=status == 401 or code in TOKEN_ERROR_CODES, detail=message[:300],
    )


def _describe_failed_deliveries(out_track_id: str, failed: list[Any]) -> str:
    parts = []
    for entry in failed:
        if not isinstance(entry, dict):
            parts.append(f"malformed entry {entry!r:.80}")
            continue
        where = f"{entry.get('spaceType') or '?'} {entry.get('spaceId') or '?'}"
        parts.append(f"{where}: {entry.get('errorMsg') or DELIVERY_FAILED_TEXT}")
    return f"DingTalk did not deliver card {out_track_id} to " + "; ".join(parts)
