"""A fake DingTalk OpenAPI server for tests: real HTTP on 127.0.0.1, a free port.

It issues app access tokens, creates and delivers card instances, updates them (merging by key or
overwriting, as asked), registers HTTP callback routes, and checks what DingTalk checks: a valid
token header, every card variable a string, the deliver and space models of each space, unique
outTrackIds. Tests can make it answer with DingTalk's QPS 403, a 5xx, a slow reply, or fail
single deliverResults entries. Every request is recorded.

``signed_callback`` builds what DingTalk POSTs to a card callback URL, in each payload shape.

    with FakeDingTalk() as fake:
        client = DingTalkClient(fake.client_id, fake.client_secret, base_url=fake.base_url)
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_PATH = "/v1.0/oauth2/accessToken"
CREATE_AND_DELIVER_PATH = "/v1.0/card/instances/createAndDeliver"
CARD_INSTANCES_PATH = "/v1.0/card/instances"
REGISTER_CALLBACK_PATH = "/v1.0/card/callbacks/register"
GATEWAY_OPEN_PATH = "/v1.0/gateway/connections/open"
QPS_LIMIT_CODE = "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"
MAX_BODY_BYTES = 1024 * 1024
MAX_DELAY_SECONDS = 5.0
SHUTDOWN_SECONDS = 5.0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    json: Any


@dataclass
class Fault:
    path: str  # "*" for any path
    times: int
    status: int = 0  # 0: no canned answer, only the delay
    body: Any = None
    delay: float = 0.0


@dataclass
class Card:
    out_track_id: str
    open_space_id: str
    template_id: str
    params: dict[str, str]
    create_body: dict[str, Any]
    updates: list[dict[str, str]] = field(default_factory=list)


class FakeDingTalk:
    def __init__(self, *, client_id: str = "ding-fake-app", client_secret: str = "fake-client-secret",
                 token_ttl: int = 7200):
        self.client_id = client_id
        self.client_secret = client_secret
        self.token_ttl = token_ttl
        self.requests: list[Recorded] = []
        self.cards: dict[str, Card] = {}
        self.routes: dict[str, dict[str, str]] = {}
        self.tokens: set[str] = set()
        self.delivery_failures: dict[str, str] = {}  # spaceId -> errorMsg of its deliverResults entry
        # Stream mode: the WebSocket endpoint connections/open hands out (a FakeStreamGateway sets
        # it) and the tickets issued and not yet used.
        self.stream_endpoint = ""
        self.stream_tickets: set[str] = set()
        self._faults: list[Fault] = []
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeDingTalk:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-dingtalk", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(SHUTDOWN_SECONDS)
        self._server = None

    def __enter__(self) -> FakeDingTalk:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- fault injection --------------------------------------------------------------------

    def fail(self, path: str, *, status: int, code: str = "", message: str = "", times: int = 1,
             body: Any = None) -> None:
        """The next ``times`` requests to ``path`` get this answer (DingTalk's {code, message, requestid})."""
        if body is None:
            body = {"code": code, "message": message, "requestid": f"fake-req-{next(self._counter)}"}
        with self._lock:
            self._faults.append(Fault(path, times, status, body))

    def qps_limit(self, path: str, *, times: int = 1) -> None:
        self.fail(path, status=403, code=QPS_LIMIT_CODE, message="调用频率超过限制", times=times)

    def server_error(self, path: str, *, status: int = 500, times: int = 1) -> None:
        if status == 500:
            self.fail(path, status=500, code="system.busy", message="系统繁忙", times=times)
        else:  # the gateway's own pages carry no DingTalk JSON
            self.fail(path, status=status, times=times, body="<html>gateway error</html>")

    def slow(self, path: str, seconds: float, *, times: int = 1) -> None:
        """Answer the next ``times`` requests to ``path`` only after ``seconds`` (processed normally)."""
        with self._lock:
            self._faults.append(Fault(path, times, delay=min(seconds, MAX_DELAY_SECONDS)))

    def fail_delivery(self, space_id: str, error_msg: str = "机器人不在群内") -> None:
        self.delivery_failures[space_id] = error_msg

    def revoke_tokens(self) -> None:
        with self._lock:
            self.tokens.clear()

    # -- reads -------------------------------------------------------------------------------

    def requests_to(self, path: str, method: str | None = None) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == path and (method is None or r.method == method)]

    def card_params(self, out_track_id: str) -> dict[str, str]:
        return dict(self.cards[out_track_id].params)

    # -- handling (called from server threads) ----------------------------------------------

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.path in (path, "*") and fault.times > 0:
                    fault.times -= 1
                    return fault
        return None

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
        fault = self._take_fault(path)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status:
                return fault.status, fault.body
        if (method, path) == ("POST", TOKEN_PATH):
            return self._token(body)
        if (method, path) == ("POST", GATEWAY_OPEN_PATH):
            return self._open_connection(body)
        with self._lock:
            authorised = headers.get("x-acs-dingtalk-access-token") in self.tokens
        if not authorised:
            return 401, {"code": "InvalidAuthentication", "message": "不合法的access_token", "requestid": "fake"}
        if not isinstance(body, dict):
            return 400, _error("param.empty", "body is mandatory")
        routes = {
            ("POST", CREATE_AND_DELIVER_PATH): self._create_and_deliver,
            ("PUT", CARD_INSTANCES_PATH): self._update_card,
            ("POST", REGISTER_CALLBACK_PATH): self._register,
        }
        route = routes.get((method, path))
        if route is None:
            return 404, _error("resource.notFound", f"no fake for {method} {path}")
        with self._lock:
            return route(body)

    def _token(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not body.get("appKey"):
            return 400, _error("body.mandatory", "body is mandatory")
        if body.get("appKey") != self.client_id or body.get("appSecret") != self.client_secret:
            return 400, _error("invalidClientIdOrSecret", "无效的clientId或者clientSecret")
        token = f"fake-token-{next(self._counter)}"
        with self._lock:
            self.tokens.add(token)
        return 200, {"accessToken": token, "expireIn": self.token_ttl}

    def _open_connection(self, body: Any) -> tuple[int, Any]:
        known = isinstance(body, dict) and (body.get("clientId"), body.get("clientSecret")) == (
            self.client_id, self.client_secret
        )
        if not known:
            return 401, _error("invalidClientIdOrSecret", "无效的clientId或者clientSecret")
        subscriptions = body.get("subscriptions")
        if not isinstance(subscriptions, list) or not subscriptions:
            return 400, _error("param.invalid", "subscriptions is empty")
        if not self.stream_endpoint:
            return 503, _error("system.busy", "no stream gateway")
        ticket = f"ticket-{next(self._counter)}"
        with self._lock:
            self.stream_tickets.add(ticket)
        return 200, {"endpoint": self.stream_endpoint, "ticket": ticket}

    def take_ticket(self, ticket: str) -> bool:
        """A ticket is good for one connection (platform §2.1)."""
        with self._lock:
            if ticket in self.stream_tickets:
                self.stream_tickets.discard(ticket)
                return True
        return False

    def _create_and_deliver(self, body: dict[str, Any]) -> tuple[int, Any]:
        for key, code in (("cardTemplateId", "param.cardTemplateIdEmpty"), ("outTrackId", "param.outTrackIdEmpty"),
                          ("openSpaceId", "param.openSpaceIdEmpty")):
            if not isinstance(body.get(key), str) or not body[key]:
                return 400, _error(code, f"{key} is empty")
        params = _param_map(body.get("cardData"))
        if isinstance(params, tuple):
            return params
        if body.get("callbackType", "STREAM") not in ("STREAM", "HTTP"):
            return 400, _error("param.invalid", "callbackType must be STREAM or HTTP")
        if body.get("callbackType") == "HTTP" and body.get("callbackRouteKey") not in self.routes:
            return 400, _error("param.invalid", "callbackRouteKey is not registered")
        prefix = "dtv1.card//"
        if not body["openSpaceId"].startswith(prefix):
            return 400, _error("param.openSpaceIdInvalid", "openSpaceId must start with dtv1.card//")
        spaces = []
        for part in body["openSpaceId"][len(prefix):].split(";"):
            space_type, _, space_id = part.partition(".")
            if space_type not in ("IM_ROBOT", "IM_GROUP") or not space_id:
                return 400, _error("param.openSpaceIdInvalid", f"unsupported space {part!r}")
            deliver = body.get("imRobotOpenDeliverModel" if space_type == "IM_ROBOT" else "imGroupOpenDeliverModel")
            space = body.get("imRobotOpenSpaceModel" if space_type == "IM_ROBOT" else "imGroupOpenSpaceModel")
            if not isinstance(deliver, dict) or (space_type == "IM_GROUP" and not deliver.get("robotCode")):
                return 400, _error("param.openDeliverModelEmpty", f"{space_type} needs its deliver model")
            if not isinstance(space, dict) or not isinstance(space.get("supportForward"), bool):
                return 400, _error("param.openSpaceModelInvalid", f"{space_type} needs its space model")
            spaces.append((space_type, space_id))
        if body["outTrackId"] in self.cards:
            return 400, _error("param.cardAlreadyExist", "卡片已存在")
        self.cards[body["outTrackId"]] = Card(body["outTrackId"], body["openSpaceId"], body["cardTemplateId"],
                                              dict(params), body)
        results = []
        for space_type, space_id in spaces:
            error = self.delivery_failures.get(space_id)
            entry: dict[str, Any] = {"spaceType": space_type, "spaceId": space_id, "success": error is None}
            if error is None:
                entry["carrierId"] = f"carrier-{next(self._counter)}"
            else:
                entry["errorMsg"] = error
            results.append(entry)
        return 200, {"success": True, "result": {"outTrackId": body["outTrackId"], "deliverResults": results}}

    def _update_card(self, body: dict[str, Any]) -> tuple[int, Any]:
        card = self.cards.get(body.get("outTrackId"))
        if not body.get("outTrackId"):
            return 400, _error("param.outTrackIdEmpty", "outTrackId is empty")
        if card is None:
            return 400, _error("param.cardNotExist", "卡片不存在")
        if not body.get("cardData") and not body.get("privateData"):
            return 400, _error("param.cardDataAndPrivateDataBothEmpty", "cardData and privateData are both empty")
        params = _param_map(body.get("cardData"))
        if isinstance(params, tuple):
            return params
        by_key = bool((body.get("cardUpdateOptions") or {}).get("updateCardDataByKey"))
        card.params = {**card.params, **params} if by_key else dict(params)
        card.updates.append(dict(params))
        return 200, {"success": True, "result": True}

    def _register(self, body: dict[str, Any]) -> tuple[int, Any]:
        key, url = body.get("callbackRouteKey"), body.get("callbackUrl")
        if not key:
            return 400, _error("param.callbackRouteKeyEmpty", "callbackRouteKey is empty")
        if not url:
            return 400, _error("param.callbackUrlEmpty", "callbackUrl is empty")
        if key not in self.routes or body.get("forceUpdate") is True:
            self.routes[key] = {"callbackUrl": url, "apiSecret": body.get("apiSecret") or ""}
        return 200, {"success": True, "result": dict(self.routes[key])}


def _param_map(card_data: Any) -> dict[str, str] | tuple[int, Any]:
    """cardData.cardParamMap, or DingTalk's 400 when it is missing or holds a non-string value."""
    params = card_data.get("cardParamMap") if isinstance(card_data, dict) else None
    if not isinstance(params, dict):
        return 400, _error("param.cardPublicDataEmpty", "cardData.cardParamMap is empty")
    bad = sorted(key for key, value in params.items() if not isinstance(value, str))
    if bad:
        return 400, _error("param.invalid", f"cardParamMap values must be strings: {', '.join(bad)}")
    return params


def _error(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message, "requestid": "fake-request"}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeDingTalk
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_GET(self) -> None:
        self._serve("GET")

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._reply(413, _error("param.invalid", "body too large"))
            return
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._reply(400, _error("param.invalid", "body is not JSON"))
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        status, reply = self.fake.handle(method, self.path, headers, body)
        self._reply(status, reply)

    def _reply(self, status: int, body: Any) -> None:
        if isinstance(body, str):
            data, content_type = body.encode(), "text/html"
        else:
            data, content_type = json.dumps(body, ensure_ascii=False).encode(), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (a timeout test): nothing to answer


# -- signed callbacks ---------------------------------------------------------------------------

SHAPES = ("content", "value", "private")


def callback_signature(timestamp: str, api_secret: str) -> str:
    digest = hmac.new(api_secret.encode(), timestamp.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def callback_payload(*, out_track_id: str, user_id: str, question_id: str = "", form: dict[str, Any] | None = None,
                     cancel: bool = False, shape: str = "content") -> dict[str, Any]:
    """A card callback body in one of DingTalk's shapes (plugin reference §6, platform §1.3):
    ``content`` — a JSON string holding cardPrivateData{actionIds, params}; ``value`` — a JSON
    string with params beside cardPrivateData; ``private`` — a top-level cardPrivateData object.
    With neither ``form`` nor ``cancel`` it is the template's card-level ``fromConfig`` noise."""
    if cancel:
        params: dict[str, Any] = {"user_cancel": "true"}
    elif form is not None:
        params = {"form": form}
    else:
        params = {"fromConfig": {"locale": "zh_CN"}}
    action_ids = [question_id] if question_id else []
    base = {"type": "actionCallback", "outTrackId": out_track_id, "corpId": "ding-fake-corp", "userId": user_id,
            "spaceType": "IM", "spaceId": "fake-space"}
    if shape == "content":
        return {**base, "content": json.dumps({"cardPrivateData": {"actionIds": action_ids, "params": params}})}
    if shape == "value":
        return {**base, "value": json.dumps({"cardPrivateData": {"actionIds": action_ids}, "params": params})}
    if shape == "private":
        return {**base, "cardPrivateData": {"actionIds": action_ids, "params": params}}
    raise ValueError(f"shape must be one of {SHAPES}")


_last_stamp = [0]
_stamp_lock = threading.Lock()


def _fresh_timestamp_ms() -> int:
    """Now in milliseconds, never the same twice in this process: DingTalk signs each callback
    afresh, and askcards accepts each signature pair once."""
    with _stamp_lock:
        _last_stamp[0] = max(int(time.time() * 1000), _last_stamp[0] + 1)
        return _last_stamp[0]


def signed_callback(api_secret: str, *, timestamp_ms: int | None = None,
                    **payload: Any) -> tuple[dict[str, str], bytes]:
    """Headers and body of an HTTP card callback, signed as DingTalk signs it (keywords as
    ``callback_payload``); without ``timestamp_ms``, a timestamp no earlier call used."""
    timestamp = str(timestamp_ms if timestamp_ms is not None else _fresh_timestamp_ms())
    headers = {
        "Content-Type": "application/json",
        "x-ddpaas-signature-timestamp": timestamp,
        "x-ddpaas-signature": callback_signature(timestamp, api_secret),
    }
    return headers, json.dumps(callback_payload(**payload), ensure_ascii=False).encode()
