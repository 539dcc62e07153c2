from __future__ import annotations

import pytest

from askcards.surfaces.feishu import cards
from askcards.surfaces.feishu.cards import render_progress_card

from .helpers import ask_id, big_ask, forms, pending, question, tagged, texts, view, walk

def test_one_form_per_pending_ask_in_registration_order():
    card = render_progress_card(view(asks=(pending(7), pending(3), pending(5)))).card
    assert [form["name"] for form in forms(card)] == ["ask_0", "ask_1", "ask_2"]
    submits = [form["elements"][-1]["behaviors"][0]["value"]["requestId"] for form in forms(card)]
    assert submits == [ask_id(7), ask_id(3), ask_id(5)]


def test_element_names_are_unique_across_the_whole_card():
    two_questions = [question(), question("Which cache?", header="Cache", multi=True)]
    card = render_progress_card(view(asks=(pending(1, two_questions), pending(2, two_questions)))).card
    names = [element["name"] for element, _ in walk(card) if "name" in element]
    assert len(names) == len(set(names))
    assert {"ask_1", "q1_0", "c1_0", "q1_1", "c1_1", "submit_1"} <= set(names)


def test_selects_and_inputs_say_required_false_explicitly():
    card = render_progress_card(view(asks=(pending(1, [question(), question(multi=True)]),))).card
    inputs = tagged(card, "select_static") + tagged(card, "multi_select_static") + tagged(card, "input")
    assert len(inputs) == 4
    assert all(element["required"] is False for element in inputs)


def test_multi_select_questions_use_the_multi_select_component():
    card = render_progress_card(view(asks=(pending(1, [question(multi=True)]),))).card
    assert [element["name"] for element in tagged(card, "multi_select_static")] == ["q0_0"]
    assert "（可多选）" in texts(card)


def test_option_values_are_indexes_and_labels_are_plain_text():
    card = render_progress_card(view(asks=(pending(1, [question(labels=("A*", "B", "C"))]),))).card
    (select,) = tagged(card, "select_static")
    assert [option["value"] for option in select["options"]] == ["0", "1", "2"]
    assert [option["text"]["content"] for option in select["options"]] == ["A*", "B", "C"]


def test_descriptions_are_shown_escaped_in_markdown_not_in_the_dropdown():
    q = question(labels=("Yes", "No"), description="**bold** <at id=all></at> [x](http://evil)")
    card = render_progress_card(view(asks=(pending(1, [q]),))).card
    form_markdown = forms(card)[0]["elements"][0]["content"]
    assert "&#42;&#42;bold&#42;&#42;" in form_markdown
    assert "<at" not in form_markdown and "](" not in form_markdown
    (select,) = tagged(card, "select_static")
    assert "bold" not in str(select)


def test_each_question_has_an_other_input_with_the_spec_placeholder():
    card = render_progress_card(view(asks=(pending(1, [question(), question()]),))).card
    placeholders = [element["placeholder"]["content"] for element in tagged(card, "input")]
    assert placeholders == ["其他（可选）", "其他（可选）"]


def test_submit_button_is_inside_its_form_and_carries_the_ask():
    card = render_progress_card(view(asks=(pending(4, sender="ou_bob"),))).card
    (button,) = [element for element, form in walk(card) if element.get("form_action_type") == "submit"]
    assert button["name"] == "submit_0" and button["text"]["content"] == "提交答案"
    assert button["behaviors"] == [{"type": "callback", "value": {
        "kind": "feishu_ask", "act": "submit", "sessionId": "s_1", "requestId": ask_id(4), "sender": "ou_bob"}}]
    assert [form for element, form in walk(card) if element is button] == ["ask_0"]


def test_submit_sender_falls_back_to_the_task_owner():
    card = render_progress_card(view(asks=(pending(1, sender=""),), sender="ou_owner")).card
    assert forms(card)[0]["elements"][-1]["behaviors"][0]["value"]["sender"] == "ou_owner"


def test_cancel_and_detail_buttons_sit_outside_the_forms():
    card = render_progress_card(view(asks=(pending(1),), detail_url="https://example.com/s/1")).card
    outside = {element["text"]["content"]: element for element, form in walk(card)
               if element["tag"] == "button" and form is None}
    assert set(outside) == {"取消任务", "会话详情"}
    assert outside["取消任务"]["behaviors"][0]["value"] == {
        "kind": "feishu_progress", "act": "cancel", "sessionId": "s_1", "sender": "ou_alice"}
    assert outside["会话详情"]["behaviors"] == [{"type": "open_url", "default_url": "https://example.com/s/1"}]


def test_waiting_card_says_so_in_header_hint_and_summary():
    card = render_progress_card(view(asks=(pending(1), pending(2)))).card
    assert card["header"]["subtitle"]["content"] == "等待你的回复"
    assert card["header"]["template"] == "orange"
    assert card["config"]["summary"]["content"] == "等待你的回复"
    assert "有 2 组问题等待你的回复" in card["body"]["elements"][0]["content"]


@pytest.mark.parametrize("status", ["running", "completed", "failed", "cancelled", "recovering"])
def test_every_render_sets_update_multi(status):
    assert render_progress_card(view(status, asks=(pending(1),))).card["config"]["update_multi"] is True


@pytest.mark.parametrize("status, text", [("completed", "已完成"), ("failed", "执行失败"), ("cancelled", "已取消")])
def test_terminal_states_render_no_forms_and_no_cancel(status, text):
    rendered = render_progress_card(view(status, asks=(pending(1),)))
    assert forms(rendered.card) == [] and rendered.shown == ()
    assert rendered.card["header"]["subtitle"]["content"] == text
    assert "取消任务" not in texts(rendered.card)


def test_recovering_card_shows_the_recovery_text_without_forms():
    rendered = render_progress_card(view("recovering", asks=(pending(1),)))
    assert forms(rendered.card) == []
    assert rendered.card["header"]["subtitle"]["content"] == "任务正在恢复执行"
    assert "任务正在恢复执行" in rendered.card["body"]["elements"][0]["content"]
    assert "等待你的回复" not in texts(rendered.card)


def test_four_big_asks_stay_within_size_and_element_limits():
    asks = tuple(big_ask(n) for n in range(4))
    rendered = render_progress_card(view(asks=asks, content="进度" * 5000, panel_url="https://askcards.example/panel/"))
    assert rendered.size <= cards.CARD_MAX_BYTES < 30 * 1024
    assert rendered.size == len(cards.dumps_card(rendered.card).encode())
    assert rendered.elements <= 200
    assert rendered.shown + rendered.overflow == tuple(ask_id(n) for n in range(4))
    assert rendered.shown, "at least the first ask gets a form"


def test_asks_that_do_not_fit_become_a_note_pointing_to_the_web_panel():
    asks = tuple(big_ask(n) for n in range(4))
    rendered = render_progress_card(view(asks=asks, panel_url="https://askcards.example/panel/"))
    assert rendered.overflow
    note = rendered.card["body"]["elements"][-2]["content"]
    assert note.startswith(f"另有 {len(rendered.overflow)} 组问题超出卡片容量，请在网页面板中作答")
    assert "(https://askcards.example/panel/)" in note


def test_element_cap_moves_later_asks_to_the_panel_note():
    many = tuple(pending(n, [question(labels=("A", "B", "C", "D"))] * 4) for n in range(8))
    rendered = render_progress_card(view(asks=many))
    assert rendered.elements <= 200
    assert len(rendered.shown) == 4 and len(rendered.overflow) == 4
    assert [form["name"] for form in forms(rendered.card)] == ["ask_0", "ask_1", "ask_2", "ask_3"]


def test_long_progress_text_is_shortened_so_forms_keep_their_place():
    rendered = render_progress_card(view(asks=(big_ask(1),), content="步骤" * 3000))
    assert rendered.shown == (ask_id(1),)
    content = rendered.card["body"]["elements"][1]["content"]
    assert content.startswith("步骤") and content.endswith("…")


def test_worst_case_single_ask_of_escaped_text_still_gets_a_form():
    nasty = [question("*" * 2000, header="*" * 12, multi=True,
                      labels=tuple('"' * 199 + str(j) for j in range(4)), description="<" * 1000)] * 4
    rendered = render_progress_card(view(asks=(pending(1, nasty),), title="标" * 500, detail_url="https://x.example/"))
    assert rendered.shown == (ask_id(1),)
    assert rendered.size <= cards.CARD_MAX_BYTES


def test_a_withdrawn_form_leaves_a_line_saying_why_in_the_panels_words():
    """The host stopped waiting (host_gone), an MCP caller went away (caller_gone): the form goes,
    and the card says so in the words the panel and the DingTalk card use."""
    withdrawn = (cards.WithdrawnAsk(id=ask_id(2), what="权限请求", reason="host_gone"),
                 cards.WithdrawnAsk(id=ask_id(1), what="Data*base", reason="caller_gone"))
    card = render_progress_card(view(asks=(pending(3),), withdrawn=withdrawn)).card
    assert [form["name"] for form in forms(card)] == ["ask_0"]
    [note] = [e for e in card["body"]["elements"] if e["tag"] == "markdown" and "已撤回" in e["content"]]
    assert note["content"] == ("**已撤回的问题**\n- 权限请求：智能体已停止等待。\n"
                               "- Data&#42;base：智能体已断开，不再等待这个回答。")
    assert card["body"]["elements"].index(note) > card["body"]["elements"].index(forms(card)[0])
    # A finished run keeps saying why (its forms are gone either way); the latest three at most.
    many = tuple(cards.WithdrawnAsk(id=ask_id(n), what=f"问题{n}", reason="host_gone") for n in range(5))
    ended = texts(render_progress_card(view("completed", withdrawn=many)).card)
    assert [f"问题{n}" in ended for n in range(5)] == [True, True, True, False, False]
    # Other endings leave no line (the ask was answered where the card shows it — on the card or
    # the panel — or the agent itself ended it).
    assert "已撤回" not in texts(render_progress_card(view(withdrawn=(
        cards.WithdrawnAsk(id=ask_id(1), what="Database", reason="by_agent"),
        cards.WithdrawnAsk(id=ask_id(2), what="Database", reason="submitted", surface="web"),
        cards.WithdrawnAsk(id=ask_id(3), what="Database", reason="submitted", surface="feishu"),
        cards.WithdrawnAsk(id=ask_id(4), what="Database", reason="timeout"),))).card)


def test_a_form_settled_in_the_host_says_where_and_how():
    """The prompt settled in the agent host's terminal, and the MCP client's own dialog or an MCP
    App answering, declining or closing the form: each line says so, as the panel does."""
    endings = (cards.WithdrawnAsk(id=ask_id(1), what="权限请求", reason="host_handled"),
               cards.WithdrawnAsk(id=ask_id(2), what="数据库", reason="submitted", surface="host"),
               cards.WithdrawnAsk(id=ask_id(3), what="部署", reason="submitted", surface="host_app"))
    assert texts(render_progress_card(view(withdrawn=endings)).card).count("\n- ") == 3
    note = cards.withdrawn_note(endings)["content"]
    assert note == ("**已撤回的问题**\n- 权限请求：已在终端处理。\n- 数据库：已在 MCP 客户端回答。\n"
                    "- 部署：已在 MCP 应用回答。")
    refused = (cards.WithdrawnAsk(id=ask_id(1), what="数据库", reason="declined", surface="host"),
               cards.WithdrawnAsk(id=ask_id(2), what="部署", reason="dismissed", surface="host"))
    assert cards.withdrawn_note(refused)["content"] == (
        "**已撤回的问题**\n- 数据库：已在 MCP 客户端拒绝回答。\n- 部署：已在 MCP 客户端关闭，未作答。")


def test_the_worst_case_ask_still_gets_its_form_beside_withdrawn_lines():
    nasty = [question("*" * 2000, header="*" * 12, multi=True,
                      labels=tuple('"' * 199 + str(j) for j in range(4)), description="<" * 1000)] * 4
    withdrawn = tuple(cards.WithdrawnAsk(id=ask_id(n), what="*" * 200, reason="caller_gone") for n in range(9))
    rendered = render_progress_card(view(asks=(pending(1, nasty),), title="标" * 500, detail_url="https://x.example/",
                                         withdrawn=withdrawn, content="*" * 6000))
    assert rendered.shown == (ask_id(1),)
    assert rendered.size <= cards.CARD_MAX_BYTES
    assert texts(rendered.card).count("智能体已断开，不再等待这个回答。") == 3


def test_long_texts_are_cut_with_an_ellipsis():
    card = render_progress_card(view(asks=(pending(1, [question("问" * 2000)]),), title="T" * 300)).card
    assert card["header"]["title"]["content"] == "T" * 99 + "…"
    assert "问" * 399 + "…" in forms(card)[0]["elements"][0]["content"]


def test_unknown_status_is_refused():
    with pytest.raises(ValueError, match="unknown progress card status 'paused'"):
        render_progress_card(view("paused"))


def test_callback_response_wraps_the_card_as_raw():
    card = render_progress_card(view()).card
    assert cards.callback_response("success", "已提交", card) == {
        "toast": {"type": "success", "content": "已提交"}, "card": {"type": "raw", "data": card}}
    assert cards.callback_response("error", "仅消息发送者可操作") == {"toast": {"type": "error", "content": "仅消息发送者可操作"}}
    with pytest.raises(ValueError):
        cards.callback_response("fatal", "x")
