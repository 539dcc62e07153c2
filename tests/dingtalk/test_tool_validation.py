"""dingtalk_ask_user_question: schema, validation order and the exact error texts (reference §2)."""
from __future__ import annotations

from datetime import timedelta

import jsonschema
import pytest

from askcards import tools
from askcards.tools import dingtalk_ask_user_question as dt
from askcards.tools.dingtalk_ask_user_question.request import (
    CancelRequest,
    CreateRequest,
    ListRequest,
    parse_request,
)

FIELDS = [{"name": "date", "label": "建议日期", "type": "DATE", "required": True}]
QUESTIONS = [{"question": "现在发布吗？", "header": "发布", "options": [{"label": "是"}, {"label": "否"}]}]
GROUP = {"type": "group", "id": "cid123==", "respondentUserIds": ["staff-a", "staff-b"]}


def error_of(arguments) -> str:
    with pytest.raises(tools.ToolInputError) as raised:
        parse_request(arguments)
    return str(raised.value)


# -- action ----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["other", "", 5, "LIST", ["list"]])
def test_unknown_action(action):
    assert error_of({"action": action, "fields": FIELDS}) == "Unknown action"


def test_action_is_checked_before_target():
    assert error_of({"action": "delete", "target": "bad"}) == "Unknown action"


def test_list_needs_nothing_else():
    assert parse_request({"action": "list"}) == ListRequest()


@pytest.mark.parametrize("arguments", [{"action": "cancel"}, {"action": "cancel", "questionId": ""},
                                       {"action": "cancel", "questionId": "  "}, {"action": "cancel", "questionId": 7}])
def test_cancel_without_a_question_id_says_to_use_list(arguments):
    assert error_of(arguments) == (
        "No cancellable targeted collection owned by you in this conversation. Use action=list."
    )


def test_cancel_with_a_question_id():
    assert parse_request({"action": "cancel", "questionId": "q_existing"}) == CancelRequest("q_existing")


@pytest.mark.parametrize("arguments", [{}, {"action": "create"}, {"fields": []}, {"questions": []},
                                       {"questions": [], "fields": []}, {"questions": None}])
def test_nothing_to_ask(arguments):
    assert error_of(arguments) == "questions or fields must contain at least one item"


def test_action_defaults_to_create():
    request = parse_request({"fields": FIELDS})

    assert isinstance(request, CreateRequest) and request.target_type == "" and request.timeout_minutes is None


def test_questions_and_fields_together_are_refused():
    assert error_of({"questions": QUESTIONS, "fields": FIELDS}) == (
        "arguments: give either questions or fields, not both"
    )


def test_create_does_not_take_a_question_id():
    assert error_of({"action": "create", "questionId": "q_existing", "fields": FIELDS}) == (
        "arguments.questionId: only action=cancel takes a questionId"
    )


# -- target ----------------------------------------------------------------------------------

SHAPE = "Error: target must specify type and id"
IDS = "Error: target IDs must be raw non-empty DingTalk IDs without prefixes or whitespace (max 256 characters)"


@pytest.mark.parametrize("target", ["cid", None, [], ["user", "u"], {}, {"type": "user"}, {"id": "u"}])
def test_target_must_be_an_object_with_type_and_id(target):
    assert error_of({"target": target, "fields": FIELDS}) == SHAPE


def test_target_with_an_extra_property():
    assert error_of({"target": {"type": "user", "id": "u", "name": "甲"}, "fields": FIELDS}) == (
        "Error: Unknown target property"
    )


@pytest.mark.parametrize("target_id", ["", "   ", "user:abc", "a b", "a\tb", "x" * 257, "a\x07b", 5, None])
def test_target_id_must_be_a_raw_id(target_id):
    assert error_of({"target": {"type": "user", "id": target_id}, "fields": FIELDS}) == IDS


@pytest.mark.parametrize("respondent", ["", "group:x", "two words", "y" * 257, 3])
def test_respondent_ids_must_be_raw_ids(respondent):
    target = {"type": "group", "id": "cid", "respondentUserIds": ["ok", respondent]}

    assert error_of({"target": target, "fields": FIELDS}) == IDS


def test_longest_allowed_id_is_256_characters_after_trimming():
    request = parse_request({"target": {"type": "user", "id": "  " + "x" * 256 + " "}, "fields": FIELDS})

    assert request.target_id == "x" * 256


@pytest.mark.parametrize("respondents", [["staff-a"], None, []])
def test_user_target_takes_no_respondent_list(respondents):
    target = {"type": "user", "id": "staff-a", "respondentUserIds": respondents}

    assert error_of({"target": target, "fields": FIELDS}) == (
        "Error: A user target can only be answered by that user; omit respondentUserIds"
    )


@pytest.mark.parametrize("kind", ["channel", "USER", "", 1])
def test_target_type_must_be_user_or_group(kind):
    assert error_of({"target": {"type": kind, "id": "x"}, "fields": FIELDS}) == (
        "Error: target.type must be user or group"
    )


@pytest.mark.parametrize("respondents", ["missing", None, [], "staff-a", [f"s{i}" for i in range(51)]])
def test_group_target_needs_1_to_50_respondents(respondents):
    target = {"type": "group", "id": "cid"}
    if respondents != "missing":
        target["respondentUserIds"] = respondents

    assert error_of({"target": target, "fields": FIELDS}) == (
        "Error: A group target requires 1–50 explicit respondentUserIds"
    )


def test_respondents_must_be_unique_ignoring_case():
    target = {"type": "group", "id": "cid", "respondentUserIds": ["Staff-A", "staff-a"]}

    assert error_of({"target": target, "fields": FIELDS}) == "Error: respondentUserIds must be unique"


def test_group_of_50_keeps_order_and_case_and_trims():
    ids = [f" Staff-{i} " for i in range(50)]
    request = parse_request({"target": {"type": "group", "id": " cid== ", "respondentUserIds": ids}, "fields": FIELDS})

    assert (request.target_type, request.target_id, request.respondent_ids) == (
        "group", "cid==", tuple(f"Staff-{i}" for i in range(50)))


def test_user_target_is_answered_by_that_user():
    request = parse_request({"target": {"type": "user", "id": "staff-b"}, "fields": FIELDS})

    assert request.respondent_ids == ("staff-b",)


def test_rules_apply_in_the_reference_order():
    # A bad id is reported before the user/respondents rule, before the type rule.
    assert error_of({"target": {"type": "user", "id": "a b", "respondentUserIds": ["x"]}, "fields": FIELDS}) == IDS
    assert error_of({"target": {"type": "robot", "id": "x", "respondentUserIds": ["a", "a"]},
                     "fields": FIELDS}) == "Error: target.type must be user or group"


def test_target_is_checked_before_the_questions():
    assert error_of({"target": {"type": "user"}}) == SHAPE


# -- timeoutMinutes --------------------------------------------------------------------------

TIMEOUT = "Error: timeoutMinutes requires target and must be an integer from 1 to 1440"


@pytest.mark.parametrize("minutes", [0, -1, 1.5, 1441, "30", None, True])
def test_timeout_must_be_a_whole_number_of_minutes_in_range(minutes):
    assert error_of({"target": GROUP, "timeoutMinutes": minutes, "fields": FIELDS}) == TIMEOUT


def test_timeout_needs_a_target():
    assert error_of({"timeoutMinutes": 30, "fields": FIELDS}) == TIMEOUT


def test_target_error_comes_before_timeout_error():
    assert error_of({"target": {"type": "user"}, "timeoutMinutes": 0, "fields": FIELDS}) == SHAPE


def test_timeout_is_checked_before_the_questions():
    assert error_of({"target": GROUP, "timeoutMinutes": 0}) == TIMEOUT


@pytest.mark.parametrize("minutes, expected", [(1, 1), (1440, 1440), (30.0, 30)])
def test_timeout_bounds_are_inclusive(minutes, expected):
    assert parse_request({"target": GROUP, "timeoutMinutes": minutes, "fields": FIELDS}).timeout_minutes == expected


def test_targeted_collection_defaults_to_five_minutes():
    assert parse_request({"target": GROUP, "fields": FIELDS}).timeout_minutes == 5


# -- the rest of the published schema, after the reference's checks ----------------------------


@pytest.mark.parametrize("arguments, expected", [
    ({"questions": [{"question": "q", "options": []}]}, "arguments.questions[0]: 'header' is a required property"),
    ({"fields": [{"name": "a", "label": "A", "type": "COLOR"}]}, "arguments.fields[0].type: 'COLOR' is not one of"),
    ({"fields": FIELDS, "colour": "red"}, "arguments: Additional properties are not allowed ('colour' was unexpected)"),
    ({"questions": QUESTIONS * 7}, "arguments.questions: "),
    ({"fields": [{"name": f"f{i}", "label": "L", "type": "TEXT"} for i in range(21)]}, "arguments.fields: "),
    ({"questions": [{"question": "q", "header": "h", "options": [{"label": str(i)} for i in range(21)]}]},
     "arguments.questions[0].options: "),
    ({"fields": [{"name": "a", "label": "A", "type": "SELECT", "options": [{"value": "1"}]}]},
     "arguments.fields[0].options[0]: 'text' is a required property"),
    ({"questions": "ask me"}, "arguments.questions: 'ask me' is not of type 'array'"),
])
def test_schema_errors_say_where_and_what(arguments, expected):
    assert error_of(arguments).startswith(expected)


def test_field_names_must_be_unique():
    fields = [{"name": "a", "label": "A", "type": "TEXT"}, {"name": " a ", "label": "B", "type": "TEXT"}]

    assert error_of({"fields": fields}) == (
        "arguments.fields[1]: field name 'a' is already used by fields[0]; names must be unique"
    )


def test_choice_fields_need_options():
    assert error_of({"fields": [{"name": "meal", "label": "餐品", "type": "SELECT"}]}) == (
        "arguments.fields[0].options: a SELECT field needs at least one option"
    )


# -- the published schema alone accepts what the reference's schema tests accept ----------------

VALID = [{"fields": FIELDS}, {"questions": QUESTIONS}, {"action": "create", "fields": FIELDS},
         {"action": "create", "questions": QUESTIONS}, {"action": "list"},
         {"action": "cancel", "questionId": "q_existing"}]
INVALID = [{}, {"action": "create"}, {"action": "cancel"}, {"action": "cancel", "questionId": ""},
           {"action": "other"}, {"fields": []}, {"questions": []}, {"fields": FIELDS, "questions": QUESTIONS},
           {"action": "create", "questionId": "q_existing"}]


@pytest.mark.parametrize("arguments", VALID)
def test_published_schema_accepts(arguments):
    assert jsonschema.Draft202012Validator(dt.INPUT_SCHEMA).is_valid(arguments)


@pytest.mark.parametrize("arguments", INVALID)
def test_published_schema_rejects(arguments):
    assert not jsonschema.Draft202012Validator(dt.INPUT_SCHEMA).is_valid(arguments)


@pytest.mark.parametrize("arguments", VALID)
def test_validation_accepts_what_the_schema_accepts(arguments):
    parse_request(arguments)


@pytest.mark.parametrize("arguments", INVALID)
def test_validation_rejects_what_the_schema_rejects(arguments):
    with pytest.raises(tools.ToolInputError):
        parse_request(arguments)


# -- as a registry tool ------------------------------------------------------------------------


def test_tool_has_the_registry_shape():
    tool = dt.TOOL

    assert (tool.name, tool.blocking, tool.input_schema) == ("dingtalk_ask_user_question", False, dt.INPUT_SCHEMA)
    assert "Do NOT poll or re-call this tool" in tool.description


def test_validate_raises_the_registry_error_with_the_exact_text():
    with pytest.raises(tools.ToolInputError) as raised:
        dt.TOOL.validate({"target": {"type": "group", "id": "cid"}, "fields": FIELDS})

    assert str(raised.value) == "Error: A group target requires 1–50 explicit respondentUserIds"


def test_validate_create_is_a_typed_request_with_its_target_and_timeout():
    request = dt.TOOL.validate({"target": GROUP, "timeoutMinutes": 30, "title": "收集发布时间", "fields": FIELDS})

    assert isinstance(request, tools.AskRequest)
    assert request.title == "收集发布时间" and request.description == "收集发布时间"
    assert request.fields == FIELDS and request.questions is None
    assert (request.target_type, request.target_id, list(request.respondent_ids)) == (
        GROUP["type"], GROUP["id"], GROUP["respondentUserIds"]
    )
    assert request.timeout == timedelta(minutes=30) and request.timeout_minutes == 30


def test_validate_list_and_cancel_are_actions():
    assert dt.TOOL.validate({"action": "list"}) == dt.ListRequest()
    assert dt.TOOL.validate({"action": "cancel", "questionId": " q_1 "}) == dt.CancelRequest("q_1")


def test_close_result_of_a_targeted_collection_lists_every_respondent_in_order():
    closing = tools.Closing(
        ask_id="q_1", title="收集发布时间", status="answered", reason="completed", target_type="group",
        target_id="cid", kept_tool_result="pending text",
        responses=[
            tools.Response("u2", "submitted", {"answers": [{"question": "Q", "answer": "A"}], "values": ["A"]}),
            tools.Response("u1", "pending"),
        ],
    )

    result = dt.TOOL.close_result(closing)

    assert result["tool_result"] == "pending text"
    assert result["collection"]["status"] == "submitted"
    assert [(row["respondent_user_id"], row["status"], row["answers"]) for row in result["collection"]["responses"]] == [
        ("u2", "submitted", [{"question": "Q", "answer": "A"}]), ("u1", "missing", []),
    ]
    assert "收集" in result["message"]
