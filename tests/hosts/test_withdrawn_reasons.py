"""An ask withdrawn because nobody waits for its answer any more says so, in the same words, on
every surface: the agent host's prompt was settled in its terminal (``host_handled``:
「已在终端处理。」), the host stopped waiting (``host_gone``: 「智能体已停止等待。」) or an MCP
caller went away (``caller_gone``: 「智能体已断开，不再等待这个回答。」); so does an ask the person
answered, declined or closed in their MCP client's own form (host=ask), which the Feishu card
cannot show (「已在 MCP 客户端回答。」). Here the Feishu progress card (rendered as it is PATCHed)
and the DingTalk card (as the fake DingTalk server holds it after the card sync); the panel's
words are tested in a real browser (tests/e2e/test_panel_browser.py); a real ``serve`` with the
real Claude Code CLI giving up on a Feishu card in tests/hosts/test_claude_code_askcards.py, and a
closed hook request on a DingTalk card in tests/hosts/test_withdrawn_e2e.py."""
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import ApplicationCommunicator

from askcards import services
from askcards.models import Ask, CardMessage, ProgressCard
from askcards.surfaces.feishu import surface as feishu_surface
from project.asgi import application
from tests.conftest import QUESTIONS, answer_for, grant_bot
from tests.hosts.test_claude_code_hook import BASH, _given_up, _open_ask, _scope

pytestmark = [pytest.mark.django_db(transaction=True)]

HOST_GONE = "智能体已停止等待。"
HOST_HANDLED = "已在终端处理。"
CALLER_GONE = "智能体已断开，不再等待这个回答。"
FEISHU_URL = "/hooks/claude-code?session=feishu-cli_host-private-ou_alice&bot=cli_host"
DINGTALK_URL = ("/hooks/claude-code?session=dingtalk%2Fdm%2Fstaff_a&platform=dingtalk&chat_type=p2p&user_id=staff_a"
                "&bot={app_id}")


async def _settled_in_the_terminal(path: str, key: str, event: dict) -> Ask:
    """Post the hook's event, wait until its prompt is asked, then report the tool ran
    (PostToolUse), as Claude Code does once the prompt was answered in its terminal; the ask once
    withdrawn. The host's own request gets no decision."""
    raw = json.dumps(event).encode()
    host = ApplicationCommunicator(application, _scope(path, key, raw))
    await host.send_input({"type": "http.request", "body": raw, "more_body": False})
    ask = await _open_ask()
    ran = json.dumps({**event, "hook_event_name": "PostToolUse", "tool_response": {"stdout": ""}}).encode()
    post = ApplicationCommunicator(application, _scope(path, key, ran))
    await post.send_input({"type": "http.request", "body": ran, "more_body": False})
    assert (await post.receive_output(timeout=10))["status"] == 200
    reply = await host.receive_output(timeout=10)
    assert reply["status"] == 200
    ask = await database_sync_to_async(Ask.objects.get)(pk=ask.id)
    assert (ask.status, ask.reason) == ("cancelled", "host_handled")
    return ask


def _left_by_its_caller(ask: Ask, settings) -> None:
    """The MCP client of a blocking call went away and its grace period passed: the worker's sweep."""
    settings.ASKCARDS_MCP_CALLER_GRACE_SECONDS = 0
    services.waiter_parked(ask_id=ask.id)
    services.caller_left(ask_id=ask.id)
    assert services.waits_lapsed(now=ask.deadline) == 1
    ask.refresh_from_db()
    assert (ask.status, ask.reason) == ("cancelled", "caller_gone")


# --------------------------------------------------------------------------------------- Feishu

@pytest.fixture
def feishu(agent_and_key, settings):
    settings.ASKCARDS_SURFACES = ["askcards.surfaces.feishu.surface.FeishuSurface"]
    agent, key = agent_and_key
    bot = services.bot_add(platform="feishu", app_id="cli_host", app_secret="secret", base_url="http://127.0.0.1:9")
    grant_bot(agent, bot)
    return agent, key, bot


def _card_texts(session_key="feishu-cli_host-private-ou_alice"):
    card = ProgressCard.objects.filter(session__key=session_key).order_by("-id").first()
    rendered = feishu_surface.render(card).card
    return card, json.dumps(rendered, ensure_ascii=False)


@pytest.mark.asyncio
async def test_on_a_feishu_card_a_prompt_the_host_gave_up_on_says_why(feishu):
    _, key, _ = feishu
    await _given_up(FEISHU_URL, key, BASH)

    card, texts = await database_sync_to_async(_card_texts)()
    assert card.status == "running"  # the run goes on; only the prompt left
    assert f"- 权限请求：{HOST_GONE}" in texts
    assert '"tag":"form"' not in texts.replace(" ", "")
    # The card was marked for a PATCH in the withdrawal's own transaction.
    message = await database_sync_to_async(CardMessage.objects.get)(progress_card=card)
    assert message.version > 1


@pytest.mark.asyncio
async def test_on_a_feishu_card_a_prompt_settled_in_the_terminal_says_so(feishu):
    _, key, _ = feishu
    await _settled_in_the_terminal(FEISHU_URL, key, BASH)

    _, texts = await database_sync_to_async(_card_texts)()
    assert f"- 权限请求：{HOST_HANDLED}" in texts and HOST_GONE not in texts
    assert '"tag":"form"' not in texts.replace(" ", "")


def test_on_a_feishu_card_an_answer_given_in_the_mcp_clients_own_form_says_where(feishu):
    """The host as a surface (host=ask): the person answered, declined or closed the form in
    their MCP client; the card's form goes and a line says where, as the panel does."""
    agent, _, bot = feishu
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_host-private-ou_alice", bot=bot)
    services.progress_put(session=session, status="running", title="部署")

    def asked(header):
        questions = [{**QUESTIONS[0], "header": header}]
        ask = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                                 arguments={"questions": questions}, timeout_seconds=600).ask
        assert ask.surfaces == ["feishu"]
        return ask

    # One at a time: a new ask_user_questions replaces the session's older open one.
    answer = answer_for()
    assert services.ask_answer(ask_id=asked("分支").id, answers=answer, surface="feishu").accepted
    assert services.ask_answer(ask_id=asked("数据库").id, answers=answer, surface="host").accepted
    assert services.host_respond(agent=agent, ask_id=asked("环境").id, action="decline").taken
    assert services.host_respond(agent=agent, ask_id=asked("版本").id, action="cancel").taken

    _, texts = _card_texts()
    assert "- 数据库：已在 MCP 客户端回答。" in texts
    assert "- 环境：已在 MCP 客户端拒绝回答。" in texts and "- 版本：已在 MCP 客户端关闭，未作答。" in texts
    assert "分支：" not in texts  # answered on the card itself: its form just goes
    assert '"tag":"form"' not in texts.replace(" ", "")


def test_on_a_feishu_card_an_mcp_ask_whose_caller_left_says_why(feishu, settings):
    agent, _, bot = feishu
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_host-private-ou_alice", bot=bot)
    services.progress_put(session=session, status="running", title="部署")
    ask = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                             arguments={"questions": QUESTIONS}).ask
    assert ask.surfaces == ["feishu"]
    _left_by_its_caller(ask, settings)

    _, texts = _card_texts()
    assert f"- Database：{CALLER_GONE}" in texts
    # A later answer of the run, or the run's end, does not take the line away.
    services.progress_put(session=session, status="completed", content="完成")
    _, texts = _card_texts()
    assert f"- Database：{CALLER_GONE}" in texts and "完成" in texts


def test_an_ask_of_an_earlier_run_is_not_named_on_the_next_runs_card(feishu, settings):
    agent, _, bot = feishu
    session, _ = services.session_upsert(agent=agent, key="feishu-cli_host-private-ou_alice", bot=bot)
    services.progress_put(session=session, status="running", title="第一轮")
    ask = services.tool_call(agent=agent, session=session, name="ask_user_questions",
                             arguments={"questions": QUESTIONS}).ask
    _left_by_its_caller(ask, settings)
    services.progress_put(session=session, status="completed")
    services.progress_put(session=session, status="running", title="第二轮")

    _, texts = _card_texts()
    assert "第二轮" in texts and CALLER_GONE not in texts


# ------------------------------------------------------------------------------------- DingTalk

@pytest.fixture
def dingtalk(agent_and_key, settings):
    from tests.dingtalk.integration import make_bot
    from tests.fakes.dingtalk import FakeDingTalk

    settings.ASKCARDS_SURFACES = ["askcards.surfaces.dingtalk.surface.DingTalkSurface"]
    agent, key = agent_and_key
    with FakeDingTalk() as fake:
        bot = make_bot(fake)  # Stream mode: the card calls back over the bot's own connection
        grant_bot(agent, bot)
        yield agent, key, bot, fake


def _dingtalk_card(fake, ask):
    from tests.dingtalk.integration import sync_cards

    sync_cards()
    track = CardMessage.objects.get(ask_id=ask.id).message_id
    return fake.card_params(track)


@pytest.mark.asyncio
async def test_on_a_dingtalk_card_a_prompt_the_host_gave_up_on_says_why(dingtalk):
    _, key, bot, fake = dingtalk
    ask = await _given_up(DINGTALK_URL.format(app_id=bot.app_id), key, BASH)

    params = await database_sync_to_async(_dingtalk_card)(fake, ask)
    assert (params["card_status"], params["question_desc"], params["form_btn_text"]) == ("expired", HOST_GONE, "已失效")


@pytest.mark.asyncio
async def test_on_a_dingtalk_card_a_prompt_settled_in_the_terminal_says_so(dingtalk):
    _, key, bot, fake = dingtalk
    ask = await _settled_in_the_terminal(DINGTALK_URL.format(app_id=bot.app_id), key, BASH)

    params = await database_sync_to_async(_dingtalk_card)(fake, ask)
    assert (params["card_status"], params["question_desc"], params["form_btn_text"]) == (
        "expired", HOST_HANDLED, "已失效")


@pytest.mark.parametrize("action, words", [("decline", "已在 MCP 客户端拒绝回答。"),
                                           ("cancel", "已在 MCP 客户端关闭，未作答。")])
def test_on_a_dingtalk_card_a_form_declined_or_closed_in_the_mcp_client_says_so(dingtalk, action, words):
    agent, _, bot, fake = dingtalk
    session, _ = services.session_upsert(agent=agent, key="dingtalk/dm/staff_a", platform="dingtalk", bot=bot,
                                         chat_type="p2p", user_id="staff_a")
    ask = services.tool_call(agent=agent, session=session, name="dingtalk_ask_user_question", arguments={
        "questions": [{"question": "部署到哪个环境？", "header": "环境", "options": [{"label": "测试"}, {"label": "生产"}]}]}).ask
    _dingtalk_card(fake, ask)  # shown
    assert services.host_respond(agent=agent, ask_id=ask.id, action=action).taken

    params = _dingtalk_card(fake, ask)
    assert (params["card_status"], params["question_desc"], params["form_btn_text"]) == ("cancelled", words, "已取消")


def test_on_a_dingtalk_card_an_mcp_ask_whose_caller_left_says_why(dingtalk, settings):
    agent, _, bot, fake = dingtalk
    session, _ = services.session_upsert(agent=agent, key="dingtalk/dm/staff_a", platform="dingtalk", bot=bot,
                                         chat_type="p2p", user_id="staff_a")
    ask = services.tool_call(agent=agent, session=session, name="dingtalk_ask_user_question", arguments={
        "questions": [{"question": "部署到哪个环境？", "header": "环境", "options": [{"label": "测试"}, {"label": "生产"}]}]}).ask
    _left_by_its_caller(ask, settings)

    params = _dingtalk_card(fake, ask)
    assert (params["card_status"], params["question_desc"], params["form_btn_text"]) == ("expired", CALLER_GONE, "已失效")
