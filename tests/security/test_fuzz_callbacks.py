"""Issue 10 point 12: the platform callback routes under hypothesis fuzzing (bounded).

Both routes run through the transport production uses (``askcards.callbacks.CallbackApp`` under
ASGI, as ``serve`` and daphne route ``/callbacks/…``) and through the Django view (WSGI servers,
the test client): every example draws one of the two, with one shared strategy.

Unsigned (or wrongly signed) input is answered below 500 and changes no row an attacker could
care about. Validly signed input of any shape — random JSON, the DingTalk payload shapes and the
Feishu card action with random values where it hurts, deep nesting, NUL, lone surrogates, huge
strings, ``nan`` timestamps — is still answered below 500. The known attack shapes are explicit
examples, so every run tries each of them.

Payload texts name the live ask with placeholders (``ASK_ID`` …) filled in per request: the
examples are static, the ask a submit answers is made afresh when an earlier one answered it.
"""
from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync
from django.db.models import Count, Sum
from django.test import Client
from hypothesis import example, given
from hypothesis import strategies as st

from askcards import services
from askcards.models import Ask, AskEvent, CallbackReceipt, CardMessage, OutboxEvent, ProgressCard, Respondent
from askcards.surfaces.dingtalk.callbacks import sign as dingtalk_sign
from askcards.surfaces.feishu import security as feishu_security
from project.asgi import application
from tests.conftest import QUESTIONS, grant_bot

from .strategies import (
    FUZZ, HUGE, NASTY_TEXT, Bytes, Raw, Text, deep, deep_object, dumps, header_text, hostile_values, json_values,
    raw_bodies, render,
)

pytestmark = pytest.mark.django_db(transaction=True)

FEISHU_APP = "cli_fuzz"
FEISHU_PLAIN_APP = "cli_fuzz_plain"
FEISHU_APPS = (FEISHU_APP, FEISHU_PLAIN_APP)
ENCRYPT_KEY = "fuzz-encrypt-key"
TOKEN = "fuzz-verification-token"
OPERATOR = "ou_alice"
TRANSPORTS = ("asgi", "django")
ASK_ID, SESSION_ID, TRACK_ID = "ASK_ID_HERE", "SESSION_ID_HERE", "TRACK_ID_HERE"


# ------------------------------------------------------------------------------------ transport


def post(transport: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """(status, body) of one POST; an exception escaping the app is the 500 a server would send."""
    if transport == "asgi":
        try:
            return async_to_sync(_post_asgi)(path, body, headers)
        except Exception as exc:  # the ASGI server turns an escaped exception into a 500
            return 500, f"{type(exc).__name__}: {exc}".encode()
    response = Client(raise_request_exception=False).generic(
        "POST", path, body, content_type="application/json", headers=headers
    )
    return response.status_code, response.content


async def _post_asgi(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """The whole ASGI application called as a server calls it (an exception escapes at once)."""
    raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    raw += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": raw,
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    start = next(message for message in sent if message["type"] == "http.response.start")
    body = b"".join(message.get("body", b"") for message in sent if message["type"] == "http.response.body")
    return start["status"], body


def assert_clean(status: int, body: bytes) -> None:
    assert status < 500, body[:300]
    json.loads(body)  # every answer is JSON, refusals included


def state() -> tuple:
    """What an unverified request must never change."""
    return (
        tuple(Ask.objects.values_list("status").annotate(n=Count("id")).order_by("status")),
        tuple(Respondent.objects.values_list("status").annotate(n=Count("id")).order_by("status")),
        AskEvent.objects.count(),
        CallbackReceipt.objects.count(),
        OutboxEvent.objects.count(),
        ProgressCard.objects.filter(cancel_requested_at__isnull=False).count(),
        CardMessage.objects.aggregate(v=Sum("version"))["v"],
    )


def fill(text: str, **ids: str) -> str:
    for placeholder, value in ids.items():
        text = text.replace(placeholder, value)
    return text


# --------------------------------------------------------------------------------------- Feishu


@pytest.fixture
def feishu(agent, recording_surface):
    """A bot with an encrypt key (signed, encrypted callbacks) and, for the refusal tests, one with
    a verification token only (Feishu sends those unsigned: the token is what authenticates)."""
    bot = services.bot_add(platform="feishu", app_id=FEISHU_APP, app_secret="fuzz-app-secret",
                           verification_token=TOKEN, encrypt_key=ENCRYPT_KEY)
    plain_bot = services.bot_add(platform="feishu", app_id=FEISHU_PLAIN_APP, app_secret="fuzz-app-secret",
                                 verification_token=TOKEN)
    sessions = {}
    for app, each in ((FEISHU_APP, bot), (FEISHU_PLAIN_APP, plain_bot)):
        grant_bot(agent, each)
        sessions[app], _ = services.session_upsert(agent=agent, key=f"feishu-{app}-private-{OPERATOR}", bot=each)
        recording_surface.present.add(sessions[app].id)
        services.progress_put(session=sessions[app], status="running", title="Fuzzed run")

    def ids(app: str = FEISHU_APP) -> dict[str, str]:
        """The placeholders' values: a pending ask of the operator's, made anew once answered."""
        session = sessions[app]
        ask = Ask.objects.filter(session=session, status=Ask.Status.PENDING).first()
        if ask is None:
            outcome = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                         arguments={"questions": QUESTIONS}, sender_id=OPERATOR)
            assert outcome.status == "pending"
            ask = outcome.ask
        return {ASK_ID: ask.id, SESSION_ID: session.id}

    ids(FEISHU_APP), ids(FEISHU_PLAIN_APP)
    return {"ids": ids, "path": f"/callbacks/feishu/{FEISHU_APP}/"}


def feishu_signed(plaintext: str, *, timestamp: str | None = None, key: str = ENCRYPT_KEY) -> tuple[bytes, dict]:
    """An encrypted body and valid signature headers for ``plaintext`` (JSON text as Feishu sends)."""
    body = json.dumps({"encrypt": feishu_security.encrypt(key, plaintext)}).encode()
    timestamp = str(int(time.time())) if timestamp is None else timestamp
    nonce = f"n-{time.monotonic_ns()}"
    signature = feishu_security.signature(timestamp, nonce, key, body)
    return body, {"X-Lark-Request-Timestamp": timestamp, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": signature}


@st.composite
def feishu_unverified(draw):
    """(body, headers) a party without the encrypt key could send."""
    kind = draw(st.sampled_from(["random", "unsigned_encrypted", "wrong_key", "altered", "tampered", "wrong_token"]))
    plaintext = render(draw(hostile_values))
    if kind == "wrong_token":  # a plaintext click of the live ask with a guessed token
        token = draw(st.sampled_from(["", TOKEN.upper(), TOKEN[:-1], TOKEN + " "]) | header_text)
        body, headers = draw(feishu_plaintexts()).replace(TOKEN, token, 1).encode("utf-8", "surrogatepass"), {}
    elif kind == "random":
        body, headers = draw(raw_bodies), {}
    elif kind == "unsigned_encrypted":
        body, headers = json.dumps({"encrypt": feishu_security.encrypt(ENCRYPT_KEY, plaintext)}).encode(), {}
    elif kind == "wrong_key":
        body, headers = feishu_signed(plaintext, key="not-the-key")
    elif kind == "altered":  # a genuine signature over another body
        _, headers = feishu_signed(plaintext)
        body = draw(raw_bodies)
    else:
        body, headers = feishu_signed(plaintext)
        body = body.replace(b'"encrypt": "', b'"encrypt": "A', 1)
    for name in draw(st.lists(st.sampled_from(["X-Lark-Request-Timestamp", "X-Lark-Request-Nonce",
                                               "X-Lark-Signature"]), max_size=3)):
        headers[name] = draw(header_text)
    return Bytes(body), headers


@FUZZ
@given(request=feishu_unverified(), transport=st.sampled_from(TRANSPORTS), app=st.sampled_from(FEISHU_APPS))
@example(request=(Bytes(deep().encode()), {}), transport="asgi", app=FEISHU_APP)
@example(request=(Bytes(deep_object().encode()), {}), transport="django", app=FEISHU_APP)
@example(request=(Bytes(b'{"encrypt": ' + deep().encode() + b"}"), {}), transport="asgi", app=FEISHU_APP)
@example(request=(Bytes(b'{"encrypt": "\\ud800"}'), {}), transport="asgi", app=FEISHU_APP)
@example(request=(Bytes(deep_object().encode()), {}), transport="asgi", app=FEISHU_PLAIN_APP)
@example(request=(Bytes(b'{"type": "url_verification", "token": "\\u0000", "challenge": "x"}'), {}), transport="asgi",
         app=FEISHU_PLAIN_APP)
@example(request=(Bytes(b"{}"), {"X-Lark-Request-Timestamp": "nan", "X-Lark-Request-Nonce": "n",
                                 "X-Lark-Signature": "0" * 64}), transport="asgi", app=FEISHU_APP)
def test_feishu_unverified_callbacks_are_refused_below_500_and_change_nothing(feishu, request, transport, app):
    body, headers = request
    ids = feishu["ids"](app)
    before = state()
    body = fill(body.decode("latin-1"), **ids).encode("latin-1")
    assert_clean(*post(transport, f"/callbacks/feishu/{app}/", body, headers))
    assert state() == before


SUBMIT_VALUE = {"kind": "feishu_ask", "act": "submit", "sessionId": SESSION_ID, "requestId": ASK_ID, "sender": OPERATOR}


def feishu_click(
    *, event_id="ev-EVENT", operator=OPERATOR, custom="c", choice="0", create_time=None, value=None
) -> Text:
    """The plaintext of one submit of the live ask, fields given (an attack value in one of them)."""
    header = {"event_id": event_id, "token": TOKEN, "event_type": "card.action.trigger"}
    if create_time is not None:
        header["create_time"] = create_time
    if value is None:
        value = SUBMIT_VALUE
    return Text(render({
        "schema": "2.0",
        "header": header,
        "event": {
            "operator": {"open_id": operator},
            "action": {"value": value, "tag": "button", "name": "submit_0",
                       "form_value": {"q0_0": choice, "c0_0": custom}},
            "context": {"open_message_id": "", "open_chat_id": "oc_1"},
        },
    }))


hostile_or = lambda *plain: st.sampled_from(plain) | hostile_values  # noqa: E731


@st.composite
def feishu_plaintexts(draw):
    """Decrypted callback text: random JSON, or a card action with random values where it hurts."""
    if draw(st.integers(0, 3)) == 0:
        return Text(render(draw(hostile_values)))
    value = dict(SUBMIT_VALUE)
    for name in draw(st.lists(st.sampled_from(sorted(value)), max_size=2)):
        value[name] = draw(hostile_values)
    cancel = {"kind": "feishu_progress", "act": "cancel", "sessionId": SESSION_ID}
    value = draw(st.sampled_from([value, cancel]) | hostile_values)
    return feishu_click(
        event_id=draw(st.one_of(st.just("ev-EVENT"), st.sampled_from(NASTY_TEXT), json_values)),
        operator=draw(hostile_or(OPERATOR, OPERATOR.upper(), "ou_mallory")),
        custom=draw(hostile_or("", "other text", HUGE[:1000])),
        choice=draw(hostile_or("0", "1", "2", 0, "", None, [], ["0", "1"], {"value": "0"})),
        create_time=draw(st.sampled_from([None, str(int(time.time() * 1_000_000)), "nan", "inf", "9" * 5000, 1.5])),
        value=value,
    )


FEISHU_ATTACKS = [
    Text('{"header": {"token": "' + TOKEN + '"}, "event": ' + deep() + "}"),
    Text(deep_object()),
    feishu_click(event_id="ev\x00nul"),
    feishu_click(event_id="ev\ud800"),
    feishu_click(operator=OPERATOR + "\x00"),
    feishu_click(custom="a\x00b"),
    feishu_click(custom="\udfff"),
    feishu_click(custom=HUGE),
    feishu_click(custom={"nested": [1, 2]}),
    feishu_click(choice=Raw("1e999")),
    feishu_click(create_time="nan"),
    feishu_click(value={"kind": "feishu_progress", "act": "cancel", "sessionId": SESSION_ID + "\x00"}),
]


def _feishu_examples(test):
    for plaintext in FEISHU_ATTACKS:
        test = example(plaintext=plaintext, transport="asgi", timestamp=None)(test)
    return example(plaintext=FEISHU_ATTACKS[2], transport="django", timestamp="nan")(test)


@FUZZ
@given(
    plaintext=feishu_plaintexts(), transport=st.sampled_from(TRANSPORTS), timestamp=st.sampled_from([None, None, "nan"])
)
@_feishu_examples
def test_feishu_signed_callbacks_of_any_content_answer_below_500(feishu, plaintext, transport, timestamp):
    ids = feishu["ids"]()
    text = fill(plaintext, **ids).replace("ev-EVENT", f"ev-{time.monotonic_ns()}")
    body, headers = feishu_signed(text, timestamp=timestamp)
    status, content = post(transport, feishu["path"], body, headers)
    assert status < 500, content[:300]


# ------------------------------------------------------------------------------------- DingTalk


@pytest.fixture
def dingtalk(agent, settings):
    from tests.dingtalk.integration import API_SECRET, QUESTIONS as DINGTALK_QUESTIONS
    from tests.dingtalk.integration import create, make_bot, make_session, out_track_id
    from tests.fakes.dingtalk import FakeDingTalk

    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "askcards-security-fuzz"}}
    with FakeDingTalk() as fake:
        bot = make_bot(fake)
        session = make_session(agent, bot)

        def ids() -> dict[str, str]:
            ask = Ask.objects.filter(session=session, status=Ask.Status.PENDING).first()
            if ask is None:
                outcome, _ = create(agent, session, {"questions": DINGTALK_QUESTIONS})
                ask = outcome.ask
                assert ask.status == "pending"
            return {ASK_ID: ask.id, TRACK_ID: out_track_id(ask)}

        ids()
        yield {"ids": ids, "secret": API_SECRET, "path": f"/callbacks/dingtalk/{bot.app_id}/"}


def dingtalk_headers(secret: str, timestamp: str | None = None) -> dict[str, str]:
    timestamp = str(int(time.time() * 1000)) if timestamp is None else timestamp
    return {"x-ddpaas-signature-timestamp": timestamp, "x-ddpaas-signature": dingtalk_sign(timestamp, secret)}


@st.composite
def dingtalk_unverified(draw):
    kind = draw(st.sampled_from(["none", "wrong_secret", "stale", "garbled"]))
    if kind == "none":
        headers = {}
    elif kind == "wrong_secret":
        headers = dingtalk_headers("not-the-secret")
    elif kind == "stale":
        headers = dingtalk_headers("callback-api-secret", timestamp=str(int((time.time() - 2 * 3600) * 1000)))
    else:
        headers = {"x-ddpaas-signature-timestamp": draw(header_text), "x-ddpaas-signature": draw(header_text)}
    shaped = dingtalk_bodies().map(lambda text: Bytes(fill(text, **{ASK_ID: "q_x"}).encode("utf-8", "surrogatepass")))
    body = draw(st.one_of(raw_bodies, shaped))
    return body, headers


@FUZZ
@given(request=dingtalk_unverified(), transport=st.sampled_from(TRANSPORTS))
@example(request=(Bytes(deep().encode()), {}), transport="asgi")
@example(request=(Bytes(deep().encode()), {}), transport="django")  # Django's own 400 was an HTML page
@example(request=(Bytes(b"{}"), {"x-ddpaas-signature-timestamp": "nan", "x-ddpaas-signature": "x"}), transport="asgi")
@example(request=(Bytes(b"{}"), {"x-ddpaas-signature-timestamp": "\u0661\u0662", "x-ddpaas-signature": "x"}),
         transport="django")
def test_dingtalk_unverified_callbacks_are_refused_below_500_and_change_nothing(dingtalk, request, transport):
    body, headers = request
    before = state()
    assert_clean(*post(transport, dingtalk["path"], body, headers))
    assert state() == before


def dingtalk_click(*, shape="private", out_track_id=TRACK_ID, question_id=ASK_ID, user_id="staff_a", params=None,
                   as_string=False) -> Text:
    """One card callback in one of DingTalk's three shapes (askcards/surfaces/dingtalk/callbacks.py)."""
    params = {"form": {"answer_0": "生产"}} if params is None else params
    base = {"type": "actionCallback", "outTrackId": out_track_id, "corpId": "ding-fake-corp", "userId": user_id}
    private = {"actionIds": [question_id], "params": params}
    if shape == "content":
        payload = {**base, "content": Raw(dumps(render({"cardPrivateData": private})))}
    elif shape == "value":
        inner = {"cardPrivateData": {"actionIds": [question_id]}, "params": params}
        payload = {**base, "value": Raw(dumps(render(inner))) if as_string else inner}
    else:
        payload = {**base, "cardPrivateData": Raw(dumps(render(private))) if as_string else private}
    return Text(render(payload))


@st.composite
def dingtalk_bodies(draw):
    if draw(st.integers(0, 3)) == 0:
        return Text(render(draw(hostile_values)))
    form = draw(st.one_of(
        st.fixed_dictionaries({}, optional={"answer_0": hostile_or("测试", "生产", "")}),
        hostile_values,
        hostile_values.map(lambda value: render(value)),  # the form as a JSON string
    ))
    params = draw(st.one_of(
        st.just({"form": form}),
        st.fixed_dictionaries({"user_cancel": hostile_or("true", True, 1, "1", "yes")}),
        st.dictionaries(st.text(max_size=8), hostile_values, max_size=3),
        hostile_values,
    ))
    return dingtalk_click(
        shape=draw(st.sampled_from(["content", "value", "private"])),
        out_track_id=draw(hostile_or(TRACK_ID, "")),
        question_id=draw(hostile_or(ASK_ID, "")),
        user_id=draw(hostile_or("staff_a", "STAFF_A", "staff_b", "")),
        params=params,
        as_string=draw(st.booleans()),
    )


DINGTALK_ATTACKS = [
    Text(deep()),
    Text(render({"outTrackId": TRACK_ID, "userId": "staff_a", "content": deep()})),
    dingtalk_click(params={"form": deep_object()}),
    dingtalk_click(shape="content", params=Raw(deep())),
    dingtalk_click(user_id="staff_a\x00"),
    dingtalk_click(user_id="\ud800"),
    dingtalk_click(params={"form": {"answer_0": "生\x00产"}}),
    dingtalk_click(params={"form": {"answer_0": "\udfff"}}),
    dingtalk_click(params={"form": {"answer_0": HUGE}}),
    dingtalk_click(params={"form": {"answer_0": {"a": [1, {"b": None}]}}}),
    dingtalk_click(params={"form": {"answer_0": Raw("1e999")}}),
    dingtalk_click(out_track_id=TRACK_ID + "\x00"),
    dingtalk_click(params={"user_cancel": Raw("NaN")}),
]


def _dingtalk_examples(test):
    for body in DINGTALK_ATTACKS:
        test = example(text=body, transport="asgi")(test)
    return test


@FUZZ
@given(text=dingtalk_bodies(), transport=st.sampled_from(TRANSPORTS))
@_dingtalk_examples
def test_dingtalk_signed_callbacks_of_any_shape_answer_below_500(dingtalk, text, transport):
    body = fill(text, **dingtalk["ids"]()).encode("utf-8", "surrogatepass")
    status, content = post(transport, dingtalk["path"], body, dingtalk_headers(dingtalk["secret"]))
    assert status < 500, content[:300]


# ------------------------------------------------------------------- the harness reaches the core


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_genuine_feishu_click_through_the_fuzz_harness_answers_the_ask(feishu, transport):
    """The signed fuzzing above is not all refused at the door: the same signing answers an ask."""
    ids = feishu["ids"]()
    body, headers = feishu_signed(fill(feishu_click(), **ids).replace("ev-EVENT", f"ev-{time.monotonic_ns()}"))
    status, content = post(transport, feishu["path"], body, headers)
    assert status == 200, content[:300]
    assert Ask.objects.get(pk=ids[ASK_ID]).status == Ask.Status.ANSWERED


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_genuine_dingtalk_click_through_the_fuzz_harness_answers_the_ask(dingtalk, transport):
    ids = dingtalk["ids"]()
    body = fill(dingtalk_click(), **ids).encode()
    status, content = post(transport, dingtalk["path"], body, dingtalk_headers(dingtalk["secret"]))
    assert status == 200, content[:300]
    assert Ask.objects.get(pk=ids[ASK_ID]).status == Ask.Status.ANSWERED


@pytest.mark.parametrize("timestamp", ["nan", "NaN", "inf", "-inf"])
def test_a_signed_feishu_click_with_a_timestamp_that_is_not_a_number_is_refused(feishu, timestamp):
    """A "nan" timestamp compared false both ways, so a click signed with it stayed fresh forever."""
    ids = feishu["ids"]()
    before = state()
    body, headers = feishu_signed(fill(feishu_click(), **ids), timestamp=timestamp)
    status, content = post("asgi", feishu["path"], body, headers)
    assert (status, json.loads(content)) == (401, {"error": "request timestamp must be unix seconds"})
    assert state() == before
