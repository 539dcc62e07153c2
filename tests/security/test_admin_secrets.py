"""Issue 10 point 12: every admin page a superuser can reach renders cleanly and shows no secret.

The pages are discovered, not listed: every model registered with ``admin.site`` gives its
changelist (plain, searched), add page and, for every stored object, its change, history and
delete pages; then every admin link found on those pages is followed (filters, sorting, inlines'
links, related objects), one level of query strings deep and bounded in count. A model registered
later is crawled without touching this file.

Secrets are the values an operator must never read back from the console: the agent key (shown
once when made), the webhook signing secret (also shown once), every bot secret (write-only in
admin), their base64 / hex spellings, the encrypted-at-rest ciphertexts, the agent key's lookup
hash and the superuser's password hash.

Answer bodies are NOT secrets from the operator console: SPEC §8 gives the ask page read-only
respondent inlines and the result, and operators need them to settle disputes while an ask is
recent. SPEC §3 bounds how long they exist instead — purged N days after the result was
delivered (ASKCARDS_ANSWER_RETENTION_DAYS) — so once purged an answer must be gone from every
admin page (result, respondent rows, audit trail, outbox). Both halves are asserted below.
"""
from __future__ import annotations

import base64
import html
import re
from collections import deque
from datetime import timedelta
from urllib.parse import urljoin, urlsplit, urlunsplit

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db import connection
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from askcards import services
from askcards.models import Agent, Ask, Bot
from tests.conftest import QUESTIONS, grant_bot, person

MAX_PAGES = 700
HREF = re.compile(r"""href\s*=\s*["']([^"'#]*)""")

FEISHU_SECRETS = {
    "app_secret": "fsAppSecret7Qx2LmP9",
    "verification_token": "fsVerifyToken4Hk8Wn",
    "encrypt_key": "fsEncryptKey3Zr6Tb",
}
DINGTALK_SECRETS = {"app_secret": "dtClientSecret5Jd1Vc", "api_secret": "dtApiSecret8Ns2Gy"}
ROTATED_APP_SECRET = "fsRotatedSecret6Pq3Xe"  # set through the admin form: leaves a history row
RETAINED_ANSWER = "retainedAnswerBody2Kf9"
PURGED_ANSWER = "purgedAnswerBody5Lm4"


def spellings(secret: str) -> set[str]:
    """The secret and the encodings a page could plausibly show it in."""
    raw = secret.encode()
    forms = {
        secret,
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
    }
    if secret.startswith("whsec_"):  # the signing key is the decoded remainder
        key = base64.b64decode(secret.removeprefix("whsec_"))
        forms |= {key.hex(), base64.urlsafe_b64encode(key).decode().rstrip("=")}
    return forms


def stored_ciphertexts() -> set[str]:
    """The encrypted-at-rest values, read past the field's decryption."""
    columns = {Bot: ("app_secret", "verification_token", "encrypt_key", "api_secret"), Agent: ("webhook_secret",)}
    found = set()
    with connection.cursor() as cursor:
        for model, names in columns.items():
            cursor.execute(f"SELECT {', '.join(names)} FROM {model._meta.db_table}")
            found |= {value for row in cursor.fetchall() for value in row if value}
    return found


def answer(custom: str) -> list[dict]:
    return [{"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": custom}]


@pytest.fixture
def world(admin_client, admin_user, recording_surface):
    """One of every kind of object, with known secrets; returns {"secrets": {...}, "asks": {...}}."""
    person("alice")
    agent, key = services.agent_create(name="agent-crawl", webhook_url="https://agent.example/hooks", web_users=["alice"])
    services.agent_create(name="agent-quiet")
    feishu_bot = services.bot_add(platform="feishu", app_id="cli_crawl", **FEISHU_SECRETS)
    dingtalk_bot = services.bot_add(
        platform="dingtalk", app_id="ding_crawl", callback_mode="http", template_id="tpl.schema", **DINGTALK_SECRETS
    )

    web, _ = services.session_upsert(agent=agent, key="web/alice", platform="web", web_user="alice", user_id="alice")
    recording_surface.present.add(web.id)
    asks = {}
    for name in ("pending", "retained", "purged", "cancelled"):
        outcome = services.tool_call(
            agent=agent, session=web, name="ask_user_questions", arguments={"questions": QUESTIONS}
        )
        assert outcome.status == "pending"
        asks[name] = outcome.ask
    assert services.ask_answer(ask_id=asks["retained"].id, answers=answer(RETAINED_ANSWER), surface="web").accepted
    assert services.ask_answer(ask_id=asks["purged"].id, answers=answer(PURGED_ANSWER), surface="web").accepted
    assert services.ask_cancel(ask=asks["cancelled"], actor="agent:agent-crawl")
    # The purged ask's result reached the agent long ago: the worker's retention step drops it.
    Ask.objects.filter(pk=asks["purged"].pk).update(result_delivered_at=timezone.now() - timedelta(days=400))
    assert services.purge_answers() == 1

    grant_bot(agent, feishu_bot)
    feishu_session, _ = services.session_upsert(agent=agent, key="feishu-cli_crawl-private-ou_a", bot=feishu_bot)
    services.progress_put(session=feishu_session, status="running", title="Nightly import")
    grant_bot(agent, dingtalk_bot)
    services.session_upsert(
        agent=agent, key="dingtalk/dm/staff_a", platform="dingtalk", bot=dingtalk_bot, user_id="staff_a"
    )
    assert services.callback_receipt(platform="feishu", event_id="ev-crawl-1")

    # A secret changed through the admin form: the bot gets a history row (its message must not
    # carry the value). follow=True consumes the success message on the way.
    response = admin_client.post(
        reverse("admin:askcards_bot_change", args=[feishu_bot.pk]),
        {
            "app_id": feishu_bot.app_id, "name": "crawl bot", "base_url": feishu_bot.base_url, "template_id": "",
            "callback_mode": "http", "is_active": "on", "app_secret": ROTATED_APP_SECRET,
            "verification_token": "", "encrypt_key": "", "api_secret": "",
        },
        follow=True,
    )
    assert response.status_code == 200
    assert Bot.objects.get(pk=feishu_bot.pk).app_secret == ROTATED_APP_SECRET

    agent.refresh_from_db()
    named = {
        "agent key": key,
        "agent key hash": agent.key_hash,
        "webhook secret": agent.webhook_secret,
        "password hash": admin_user.password,
        "password digest": admin_user.password.rsplit("$", 1)[-1],
        "rotated feishu app secret": ROTATED_APP_SECRET,
        **{f"feishu {name}": value for name, value in FEISHU_SECRETS.items()},
        **{f"dingtalk {name}": value for name, value in DINGTALK_SECRETS.items()},
        "purged answer": PURGED_ANSWER,
    }
    forms = {form: name for name, value in named.items() for form in spellings(value)}
    forms.update({ciphertext: "ciphertext at rest" for ciphertext in stored_ciphertexts()})
    return {"secrets": forms, "asks": asks}


def secrets_in(body: str, secrets: dict[str, str]) -> list[str]:
    text = body + "\n" + html.unescape(body)
    return sorted({name for form, name in secrets.items() if form in text})


def _url(model_admin, view: str, *args) -> str | None:
    opts = model_admin.model._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[quote(arg) for arg in args])
    except NoReverseMatch:
        return None


def seeds(request) -> list[tuple[str, int]]:
    """(url, expected status) of every registered model's pages and every stored object's pages."""
    found = [(reverse("admin:index"), 200)]
    for model, model_admin in admin.site._registry.items():
        found.append((_url(model_admin, "changelist"), 200))
        if model_admin.search_fields:
            found.append((_url(model_admin, "changelist") + "?q=a", 200))
        add = _url(model_admin, "add")
        if add:
            found.append((add, 200 if model_admin.has_add_permission(request) else 403))
        for obj in model._default_manager.all():
            found.append((_url(model_admin, "change", obj.pk), 200))
            found.append((_url(model_admin, "history", obj.pk), 200))
            deletable = model_admin.has_delete_permission(request, obj)
            found.append((_url(model_admin, "delete", obj.pk), 200 if deletable else 403))
    return found


def crawl(client, start: list[str]) -> dict[str, object]:
    """GET every page reachable from ``start`` inside the admin (bounded); {url: response}."""
    root = reverse("admin:index")
    queue, seen, pages = deque(start), set(), {}
    while queue and len(pages) < MAX_PAGES:
        url = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        pages[url] = response
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        for href in HREF.findall(response.content.decode()):
            target = urlsplit(urljoin(url, html.unescape(href)))
            if target.netloc not in ("", "testserver") or not target.path.startswith(root):
                continue
            if "logout" in target.path:
                continue
            if target.query and urlsplit(url).query:
                continue  # one level of filters / sorting / pages: combinations would not end
            queue.append(urlunsplit(("", "", target.path, target.query, "")))
    return pages


def test_every_admin_page_renders_and_shows_no_secret(admin_client, rf, admin_user, world):
    request = rf.get("/admin/")
    request.user = admin_user
    expected = [(url, status) for url, status in seeds(request) if url]
    pages = crawl(admin_client, [url for url, _ in expected])

    problems = []
    for url, status in expected:
        if pages[url].status_code != status:
            problems.append(f"{url}: {pages[url].status_code}, expected {status}")
    for url, response in pages.items():
        if response.status_code not in (200, 302, 403):
            problems.append(f"{url}: {response.status_code}")
        if response.status_code == 302 and "/login/" in response["Location"]:
            problems.append(f"{url}: redirected to the login page")
        leaked = secrets_in(response.content.decode(errors="replace"), world["secrets"])
        if leaked:
            problems.append(f"{url} shows {', '.join(leaked)}")
    assert not problems, "\n".join(problems)

    # The crawl reached past the seeds: filter and sort links of changelists were followed.
    assert any("?" in url and "q=" not in url for url in pages)
    assert len(pages) < MAX_PAGES, "crawl hit its bound: raise MAX_PAGES or the pages grew links"


def test_answers_stay_visible_to_operators_until_purged(admin_client, world):
    retained = admin_client.get(reverse("admin:askcards_ask_change", args=[quote(world["asks"]["retained"].id)]))
    purged = admin_client.get(reverse("admin:askcards_ask_change", args=[quote(world["asks"]["purged"].id)]))
    assert RETAINED_ANSWER in retained.content.decode()
    assert purged.status_code == 200 and PURGED_ANSWER not in purged.content.decode()


def test_the_secret_check_sees_a_secret_the_admin_shows_once(admin_client, world):
    """The detector is not blind: rotating a key shows it once, in a message, and is caught."""
    agent = Agent.objects.get(name="agent-quiet")
    response = admin_client.post(
        reverse("admin:askcards_agent_changelist"),
        {"action": "rotate_key", "_selected_action": [agent.pk]},
        follow=True,
    )
    key = re.search(r"ak_[A-Za-z0-9_-]{43}", response.content.decode()).group()
    assert secrets_in(response.content.decode(), {form: "new key" for form in spellings(key)}) == ["new key"]
    follow_up = admin_client.get(reverse("admin:askcards_agent_change", args=[agent.pk]))
    assert not secrets_in(follow_up.content.decode(), {form: "new key" for form in spellings(key)})
