"""A fake Feishu / Lark OpenAPI server: real HTTP on 127.0.0.1, for tests and benchmarks.

It issues tenant tokens, accepts card sends, replies and PATCHes, records every request, and
enforces the documented rules the askcards card path depends on (reference §1, §3): strict
card JSON 2.0 properties for the components it knows, names unique across the card, a named
submit button in every form, the 30 KB and 200-element limits, ``update_multi: true`` in both the
sent card and every PATCH, at most 5 PATCHes per second per message (230020), uuid-idempotent
sends. Faults can be queued: any HTTP status / code with headers (429 + ``x-ogw-ratelimit-reset``,
5xx, token codes) and delays longer than a client's timeout; or the whole platform can be down for
a period (``outage``: every request answered 5xx, or held past the client's timeout).

    with FakeFeishu() as fake:
        client = FeishuClient(fake.app_id, fake.app_secret, fake.base_url)
"""
from __future__ import annotations

import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/open-apis/im/v1/messages"
CARD_MAX_BYTES = 30 * 1024
CARD_MAX_ELEMENTS = 200
UUID_WINDOW_SECONDS = 3600
MAX_DELAY_SECONDS = 5.0  # a queued delay never holds a test longer than this


class FakeClock:
    """A clock tests advance instead of sleeping; hand ``now`` to the server and ``sleep`` to clients."""

    def __init__(self, start: float = 1000.0):
        self._now = start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self._now += seconds


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes
    json: Any
    status: int = 0
    code: int | None = None

    @property
    def card(self) -> dict[str, Any] | None:
        content = self.json.get("content") if isinstance(self.json, dict) else None
        return json.loads(content) if isinstance(content, str) else None


@dataclass
class Fault:
    status: int | None = None  # None: answer normally after the delay (the request takes effect)
    code: int | None = None
    msg: str = "injected fault"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    method: str | None = None
    path: str | None = None  # prefix of the path (no query)

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (self.path is None or path.startswith(self.path))


@dataclass
class Message:
    message_id: str
    chat_id: str
    receive_id: str
    uuid: str
    card: dict[str, Any]
    cards: list[dict[str, Any]]  # every version, the sent one first
    reply_to: str = ""


class CardRejected(Exception):
    def __init__(self, code: int, msg: str):
        super().__init__(msg)
        self.code = code
        self.msg = msg


# Properties the fake knows per tag (official 2.0 component pages); anything else is rejected,
# because card 2.0 fails a send on unknown properties (reference §1.1).
_TEXT = {"tag", "content", "i18n_content", "text_size", "text_color", "text_align", "lines"}
_COMMON = {"tag", "element_id", "margin"}
_INTERACTIVE = _COMMON | {"name", "disabled", "confirm", "behaviors", "width"}
ALLOWED = {
    "plain_text": _TEXT,
    "lark_md": _TEXT,
    "markdown": _COMMON | {"content", "i18n_content", "text_align", "text_size", "icon"},
    "hr": _COMMON,
    "form": _COMMON | {"name", "elements", "direction", "vertical_spacing", "horizontal_spacing",
                       "horizontal_align", "vertical_align", "padding"},
    "column_set": _COMMON | {"flex_mode", "horizontal_spacing", "horizontal_align", "background_style",
                             "columns", "action"},
    "column": _COMMON | {"width", "weight", "vertical_align", "vertical_spacing", "horizontal_align",
                         "horizontal_spacing", "direction", "padding", "background_style", "elements", "action"},
    "button": _INTERACTIVE | {"type", "size", "text", "icon", "hover_tips", "disabled_tips", "form_action_type",
                              "value"},
    "select_static": _INTERACTIVE | {"type", "required", "placeholder", "options", "initial_option",
                                     "initial_index"},
    "multi_select_static": _INTERACTIVE | {"type", "required", "placeholder", "options", "selected_values"},
    "input": _INTERACTIVE | {"required", "placeholder", "default_value", "max_length", "input_type", "rows",
                             "auto_resize", "max_rows", "label", "label_position", "show_icon", "disabled_tips"},
}
INTERACTIVE_TAGS = {"button", "select_static", "multi_select_static", "input"}
TOP_LEVEL = {"schema", "config", "card_link", "header", "body"}
CONFIG = {"update_multi", "enable_forward", "enable_forward_interaction", "width_mode", "summary", "locales",
          "use_custom_translation", "style", "streaming_mode", "streaming_config"}
HEADER = {"title", "subtitle", "template", "text_tag_list", "icon", "padding"}
BODY = {"direction", "padding", "horizontal_spacing", "horizontal_align", "vertical_spacing", "vertical_align",
        "elements"}
TEMPLATES = {"blue", "wathet", "turquoise", "green", "yellow", "orange", "red", "carmine", "violet", "purple",
             "indigo", "grey", "default"}
BUTTON_TYPES = {"default", "primary", "danger", "text", "primary_text", "danger_text", "primary_filled",
                "danger_filled", "laser"}
BUTTON_SIZES = {"tiny", "small", "medium", "large"}


def _fail(reason: str) -> None:
    raise CardRejected(230099, f"Failed to create card content: {reason}")


def _keys(obj: Any, allowed: set[str], where: str) -> None:
    if not isinstance(obj, dict):
        _fail(f"{where} must be an object")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        _fail(f"unknown property {unknown[0]!r} on {where}")


def count_elements(node: Any) -> int:
    if isinstance(node, dict):
        return ("tag" in node) + sum(count_elements(value) for value in node.values())
    if isinstance(node, list):
        return sum(count_elements(value) for value in node)
    return 0


class CardValidator:
    """One pass over a card; raises ``CardRejected`` at the first rule it breaks."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def validate(self, card: Any) -> None:
        _keys(card, TOP_LEVEL, "card")
        if card.get("schema") != "2.0":
            _fail('schema must be "2.0"')
        config = card.get("config", {})
        _keys(config, CONFIG, "config")
        if "update_multi" in config and config["update_multi"] is not True:
            _fail("config.update_multi only supports true in card 2.0")
        if "summary" in config:
            _keys(config["summary"], {"content", "i18n_content"}, "config.summary")
        if "header" in card:
            self._header(card["header"])
        body = card.get("body")
        _keys(body, BODY, "body")
        if not isinstance(body.get("elements"), list):
            _fail("body.elements must be a list")
        for element in body["elements"]:
            self._element(element, form=None, root=True)
        count = count_elements(card)
        if count > CARD_MAX_ELEMENTS:
            _fail(f"ErrCode: 11310; card has {count} elements, more than {CARD_MAX_ELEMENTS}")

    def _header(self, header: Any) -> None:
        _keys(header, HEADER, "header")
        if "title" not in header:
            _fail("header.title is required")
        self._text(header["title"], "header.title", tags=("plain_text", "lark_md"))
        if "subtitle" in header:
            self._text(header["subtitle"], "header.subtitle", tags=("plain_text", "lark_md"))
        if "template" in header and header["template"] not in TEMPLATES:
            _fail(f"header.template {header['template']!r} is not a known colour")

    def _text(self, text: Any, where: str, *, tags: tuple[str, ...] = ("plain_text",), limit: int = 0) -> None:
        if not isinstance(text, dict) or text.get("tag") not in tags:
            _fail(f"{where} must be a text object with tag {' or '.join(tags)}")
        _keys(text, ALLOWED[text["tag"]], where)
        if not isinstance(text.get("content"), str):
            _fail(f"{where}.content must be a string")
        if limit and len(text["content"]) > limit:
            _fail(f"{where} is longer than {limit} characters")

    def _name(self, element: dict[str, Any], form: str | None) -> None:
        name = element.get("name")
        if name is None or name == "":
            if form is not None and element["tag"] in INTERACTIVE_TAGS:
                _fail(f"ErrCode: 200530; {element['tag']} in form {form!r} has an empty name")
            return
        if not isinstance(name, str):
            _fail("name must be a string")
        if name in self.names:
            _fail(f"name {name!r} is used twice; names must be unique across the card")
        self.names.add(name)

    def _element(self, element: Any, *, form: str | None, root: bool = False) -> None:
        if not isinstance(element, dict) or element.get("tag") not in ALLOWED:
            tag = element.get("tag") if isinstance(element, dict) else type(element).__name__
            _fail(f"unknown or unsupported component tag {tag!r}")
        tag = element["tag"]
        _keys(element, ALLOWED[tag], tag)
        self._name(element, form)
        if "required" in element and not isinstance(element["required"], bool):
            _fail(f"{tag}.required must be a boolean")
        check = getattr(self, f"_check_{tag}", None)
        if check is not None:
            check(element, form=form, root=root)

    def _check_form(self, element: dict[str, Any], *, form: str | None, root: bool) -> None:
        if not root:
            _fail("a form may only sit at the card root")
        if not element.get("name"):
            _fail("form.name is required")
        elements = element.get("elements")
        if not isinstance(elements, list):
            _fail("form.elements must be a list")
        for child in elements:
            self._element(child, form=element["name"])
        if not _has_submit(elements):
            _fail(f"form {element['name']!r} has no button with form_action_type submit")

    def _check_column_set(self, element: dict[str, Any], *, form: str | None, root: bool) -> None:
        for column in element.get("columns", []):
            if not isinstance(column, dict) or column.get("tag") != "column":
                _fail("column_set.columns may only contain column")
            self._element(column, form=form)

    def _check_column(self, element: dict[str, Any], *, form: str | None, root: bool) -> None:
        for child in element.get("elements", []):
            if isinstance(child, dict) and child.get("tag") == "form":
                _fail("a column cannot contain a form")
            self._element(child, form=form)

    def _check_markdown(self, element: dict[str, Any], **_: Any) -> None:
        if not isinstance(element.get("content"), str):
            _fail("markdown.content must be a string")

    def _check_button(self, element: dict[str, Any], *, form: str | None, root: bool) -> None:
        if element.get("type", "default") not in BUTTON_TYPES:
            _fail(f"button.type {element.get('type')!r} is not one of {sorted(BUTTON_TYPES)}")
        if element.get("size", "medium") not in BUTTON_SIZES:
            _fail(f"button.size {element.get('size')!r} is not one of {sorted(BUTTON_SIZES)}")
        self._text(element.get("text"), "button.text", tags=("plain_text", "lark_md"), limit=100)
        action = element.get("form_action_type")
        if action is not None and (form is None or action not in ("submit", "reset")):
            _fail("form_action_type must be submit or reset, on a button inside a form")
        behaviors = element.get("behaviors", [])
        if not isinstance(behaviors, list):
            _fail("button.behaviors must be a list")
        for behavior in behaviors:
            kind = behavior.get("type") if isinstance(behavior, dict) else None
            if kind == "callback":
                _keys(behavior, {"type", "value"}, "callback behavior")
                if not isinstance(behavior.get("value"), dict):
                    _fail("a callback behavior value must be an object")
            elif kind == "open_url":
                _keys(behavior, {"type", "default_url", "pc_url", "ios_url", "android_url"}, "open_url behavior")
            else:
                _fail(f"unknown behavior type {kind!r}")

    def _check_select_static(self, element: dict[str, Any], **_: Any) -> None:
        if "placeholder" in element:
            self._text(element["placeholder"], f"{element['tag']}.placeholder", limit=100)
        options = element.get("options")
        if not isinstance(options, list) or not options:
            _fail(f"{element['tag']}.options must be a non-empty list")
        values = []
        for option in options:
            _keys(option, {"text", "value", "icon"}, "option")
            self._text(option.get("text"), "option.text", tags=("plain_text", "lark_md"))
            if not isinstance(option.get("value"), str):
                _fail("option.value must be a string")
            values.append(option["value"])
        if len(set(values)) != len(values):
            _fail(f"option values of {element.get('name')!r} are not unique")

    def _check_multi_select_static(self, element: dict[str, Any], *, form: str | None, root: bool) -> None:
        if form is None:
            _fail("multi_select_static may only be used inside a form")
        self._check_select_static(element)

    def _check_input(self, element: dict[str, Any], **_: Any) -> None:
        if "placeholder" in element:
            self._text(element["placeholder"], "input.placeholder", limit=100)
        max_length = element.get("max_length", 1000)
        if not isinstance(max_length, int) or not 1 <= max_length <= 1000:
            _fail("input.max_length must be 1-1000")


def _has_submit(elements: list[Any]) -> bool:
    for element in elements:
        if not isinstance(element, dict):
            continue
        if element.get("tag") == "button" and element.get("form_action_type") == "submit":
            return True
        nested = element.get("columns") or element.get("elements") or []
        if isinstance(nested, list) and _has_submit(nested):
            return True
    return False


def check_card(content: Any) -> dict[str, Any]:
    """The card in a message ``content`` string, if Feishu would accept it; else ``CardRejected``."""
    if not isinstance(content, str):
        raise CardRejected(230001, "content must be the card JSON serialized as a string")
    if len(content.encode("utf-8")) > CARD_MAX_BYTES:
        raise CardRejected(230025, f"card content is {len(content.encode())} bytes, more than 30 KB")
    try:
        card = json.loads(content)
    except ValueError:
        raise CardRejected(230099, "Failed to create card content: ErrCode: 200621; card JSON parse error") from None
    CardValidator().validate(card)
    return card


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # One buffered write per response: headers and body in separate segments meet delayed ACKs
    # on keep-alive connections and cost ~40 ms per request.
    wbufsize = -1
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _dispatch(self) -> None:
        self.server.fake._handle(self)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeFeishu


class FakeFeishu:
    def __init__(
        self,
        *,
        app_id: str = "cli_fake_app",
        app_secret: str = "fake-app-secret",
        token_ttl: int = 7200,
        patch_qps: int = 5,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.app_id = app_id
        self.app_secret = app_secret
        self.token_ttl = token_ttl
        self.patch_qps = patch_qps
        self.clock = clock
        self.requests: list[Recorded] = []
        self.messages: dict[str, Message] = {}
        self.rejections: list[str] = []  # why cards were refused, in order
        self._tokens: dict[str, float] = {}  # token -> expiry (clock)
        self._uuids: dict[str, tuple[str, float]] = {}  # uuid -> (message id, sent at)
        self._patches: dict[str, deque[float]] = {}
        self._faults: list[Fault] = []
        self._outage: tuple[str, float, float] | None = None  # (mode, until (time.monotonic), hang seconds)
        self.outage_requests = 0  # requests refused or held by an outage
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> FakeFeishu:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-feishu", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "use FakeFeishu as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- test controls ----------------------------------------------------------------------------

    def fail(self, *, times: int = 1, status: int | None = None, code: int | None = None,
             msg: str = "injected fault", headers: dict[str, str] | None = None, delay: float = 0.0,
             method: str | None = None, path: str | None = None) -> None:
        """Queue a fault for the next ``times`` matching requests (token requests included unless
        ``path`` narrows it). ``status`` None with a ``delay``: answer normally, only late."""
        if status is None and code is not None:
            status = 400
        with self._lock:
            for _ in range(times):
                self._faults.append(Fault(status, code, msg, dict(headers or {}), min(delay, MAX_DELAY_SECONDS),
                                          method, path))

    def outage(self, mode: str, seconds: float, *, hang: float = 11.0) -> None:
        """For the next ``seconds`` (wall time, whatever ``clock`` is), every request fails and takes
        no effect: ``"5xx"`` answers 503 at once; ``"hang"`` holds the request ``hang`` seconds (past
        the askcards client's 10 s read timeout) and then drops the connection unanswered."""
        if mode not in ("5xx", "hang"):
            raise ValueError(f"outage mode must be '5xx' or 'hang', not {mode!r}")
        with self._lock:
            self._outage = (mode, time.monotonic() + seconds, hang)

    def _outage_mode(self) -> tuple[str, float] | None:
        with self._lock:
            if self._outage is None or time.monotonic() >= self._outage[1]:
                return None
            self.outage_requests += 1
            return self._outage[0], self._outage[2]

    def expire_tokens(self) -> None:
        """Every issued tenant token stops working (the next call gets 99991663)."""
        with self._lock:
            self._tokens.clear()

    def calls(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests
                    if (method is None or r.method == method) and (path is None or r.path.startswith(path))]

    @property
    def token_requests(self) -> list[Recorded]:
        return self.calls("POST", TOKEN_PATH)

    # --- HTTP ---------------------------------------------------------------------------------

    def _handle(self, handler: _Handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        url = urlsplit(handler.path)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        record = Recorded(handler.command, url.path, dict(parse_qsl(url.query)),
                          {key.lower(): value for key, value in handler.headers.items()}, raw, parsed)
        outage = self._outage_mode()
        if outage is not None:
            mode, hang = outage
            with self._lock:
                self.requests.append(record)
            if mode == "hang":
                time.sleep(hang)
                record.status = 0
                handler.close_connection = True
                return
            record.status = 503
            self._respond(handler, 503, {"code": 1, "msg": "service unavailable (outage)"}, {})
            return
        with self._lock:
            self.requests.append(record)
            fault = next((f for f in self._faults if f.matches(record.method, record.path)), None)
            if fault is not None:
                self._faults.remove(fault)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.status is not None:
            status, body, headers = fault.status, {"code": fault.code, "msg": fault.msg}, fault.headers
            if fault.code is None:
                body = {"code": 99991400 if fault.status == 429 else 1, "msg": fault.msg}
        else:
            with self._lock:
                status, body = self._route(record)
            headers = {}
        record.status, record.code = status, body.get("code")
        self._respond(handler, status, body, headers)

    @staticmethod
    def _respond(handler: _Handler, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json; charset=utf-8")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout); the request still took effect

    def _route(self, r: Recorded) -> tuple[int, dict[str, Any]]:
        if r.method == "POST" and r.path == TOKEN_PATH:
            return self._token(r)
        if not r.path.startswith(MESSAGES_PATH):
            return 404, {"code": 404, "msg": f"no such API: {r.method} {r.path}"}
        token_error = self._check_auth(r)
        if token_error:
            return token_error
        if not isinstance(r.json, dict):
            return 400, {"code": 230001, "msg": "body must be a JSON object"}
        parts = r.path[len(MESSAGES_PATH):].strip("/").split("/")
        try:
            if r.method == "POST" and parts == [""]:
                return self._send(r)
            if r.method == "POST" and len(parts) == 2 and parts[1] == "reply":
                return self._reply(r, parts[0])
            if r.method == "PATCH" and len(parts) == 1:
                return self._patch(r, parts[0])
            if r.method == "PUT" and len(parts) == 1 and r.json.get("msg_type") == "interactive":
                return 400, {"code": 230001, "msg": "invalid msg_type: cards are updated with PATCH"}
        except CardRejected as rejected:
            self.rejections.append(rejected.msg)
            return 400, {"code": rejected.code, "msg": rejected.msg}
        return 404, {"code": 404, "msg": f"no such API: {r.method} {r.path}"}

    def _token(self, r: Recorded) -> tuple[int, dict[str, Any]]:
        body = r.json if isinstance(r.json, dict) else {}
        if body.get("app_id") != self.app_id:
            return 400, {"code": 10003, "msg": "invalid param: app_id"}
        if body.get("app_secret") != self.app_secret:
            return 400, {"code": 10015, "msg": "app secret invalid"}
        token = "t-" + secrets.token_hex(12)
        self._tokens[token] = self.clock() + self.token_ttl
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.token_ttl}

    def _check_auth(self, r: Recorded) -> tuple[int, dict[str, Any]] | None:
        header = r.headers.get("authorization", "")
        if not header.startswith("Bearer t-"):
            return 400, {"code": 99991661, "msg": "Missing access token for authorization"}
        expiry = self._tokens.get(header.removeprefix("Bearer "))
        if expiry is None or expiry <= self.clock():
            return 400, {"code": 99991663, "msg": "Invalid access token for authorization"}
        return None

    def _remembered(self, uuid: Any) -> Message | None:
        if uuid in (None, ""):
            return None
        if not isinstance(uuid, str) or len(uuid) > 50:
            raise CardRejected(230001, "uuid must be a string of at most 50 characters")
        known = self._uuids.get(uuid)
        if known and self.clock() - known[1] < UUID_WINDOW_SECONDS:
            return self.messages[known[0]]
        return None

    def _create(self, r: Recorded, *, chat_id: str, receive_id: str, reply_to: str = "") -> tuple[int, dict]:
        if r.json.get("msg_type") != "interactive":
            raise CardRejected(230001, "this fake only accepts msg_type interactive")
        existing = self._remembered(r.json.get("uuid"))
        if existing is None:
            card = check_card(r.json.get("content"))
            existing = Message("om_" + secrets.token_hex(12), chat_id, receive_id, r.json.get("uuid") or "",
                               card, [card], reply_to)
            self.messages[existing.message_id] = existing
            if existing.uuid:
                self._uuids[existing.uuid] = (existing.message_id, self.clock())
        data = {"message_id": existing.message_id, "chat_id": existing.chat_id, "msg_type": "interactive",
                "create_time": str(int(self.clock() * 1000))}
        return 200, {"code": 0, "msg": "success", "data": data}

    def _send(self, r: Recorded) -> tuple[int, dict[str, Any]]:
        id_type, receive_id = r.query.get("receive_id_type"), r.json.get("receive_id")
        if id_type not in ("open_id", "union_id", "user_id", "email", "chat_id"):
            raise CardRejected(230001, "invalid receive_id_type")
        if not isinstance(receive_id, str) or not receive_id:
            raise CardRejected(230034, "invalid receive_id")
        chat_id = receive_id if id_type == "chat_id" else "oc_p2p_" + receive_id
        return self._create(r, chat_id=chat_id, receive_id=receive_id)

    def _reply(self, r: Recorded, message_id: str) -> tuple[int, dict[str, Any]]:
        parent = self.messages.get(message_id)
        if parent is None:
            raise CardRejected(230110, "message not found or deleted")
        return self._create(r, chat_id=parent.chat_id, receive_id=parent.receive_id, reply_to=message_id)

    def _patch(self, r: Recorded, message_id: str) -> tuple[int, dict[str, Any]]:
        message = self.messages.get(message_id)
        if message is None:
            raise CardRejected(230110, "message not found or deleted")
        now = self.clock()
        window = self._patches.setdefault(message_id, deque())
        while window and window[0] <= now - 1.0:
            window.popleft()
        if len(window) >= self.patch_qps:
            return 400, {"code": 230020, "msg": "request trigger frequency limit of this message"}
        card = check_card(r.json.get("content"))
        if message.card.get("config", {}).get("update_multi") is not True or \
                card.get("config", {}).get("update_multi") is not True:
            raise CardRejected(230001, "update_multi must be set to true in both the sent card and the new one")
        window.append(now)
        message.card = card
        message.cards.append(card)
        return 200, {"code": 0, "msg": "success", "data": {}}
