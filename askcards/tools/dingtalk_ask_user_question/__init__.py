"""``dingtalk_ask_user_question`` (DingTalk seed, SPEC §4.2, reference/dingtalk-plugin.md §2–§4, §9, §10).

Non-blocking: ``create`` returns at once; the answer reaches the agent later as a ``message`` the
agent injects as a new user turn. Pure, like every tool: ``schema`` (what the model is shown),
``request`` (validation to typed requests, the form, how submitted values read as answers),
``texts`` (what the model reads back), and here the ``Tool`` whose hooks the services call. The
card itself (its variables in every state, the clicker's notices) is the DingTalk surface's:
``askcards.surfaces.dingtalk.cards``.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..base import AskRequest, Closing, Tool
from .answers import CheckedForm, FormRefused, check_form, default_of
from .request import (
    CancelRequest,
    CreateRequest,
    ListRequest,
    Submission,
    TIMEOUT_ERROR,
    as_text,
    form_fields_from_fields,
    parse_request,
    read_submission,
)
from .schema import DEFAULT_TIMEOUT_MINUTES, DESCRIPTION, INPUT_SCHEMA, NAME
from .texts import (
    ACTIVATION_LOST_ERROR,
    CANCEL_NOT_ALLOWED_ERROR,
    COLLECTION_PROMPT,
    COLLECTION_STATUS,
    NO_CONTEXT_ERROR,
    PENDING_MESSAGE,
    answer_message,
    cancel_details,
    collection_message,
    collection_result,
    delivery_error,
    failed_details,
    list_details,
    pending_details,
    tool_result_text,
)

# The tool's public names: the services and the DingTalk surface import them from here.
__all__ = [
    "ACTIVATION_LOST_ERROR", "CANCEL_NOT_ALLOWED_ERROR", "COLLECTION_PROMPT", "COLLECTION_STATUS",
    "DEFAULT_TIMEOUT_MINUTES", "DESCRIPTION", "INPUT_SCHEMA", "NAME", "NO_CONTEXT_ERROR", "PENDING_MESSAGE",
    "TIMEOUT_ERROR", "TOOL", "CancelRequest", "CheckedForm", "CreateRequest", "DingTalkAskUserQuestion", "FormRefused",
    "ListRequest", "Submission", "answer_message", "as_text", "cancel_details", "check_form", "default_of", "collection_message", "collection_result",
    "delivery_error", "failed_details", "form_fields_from_fields", "list_details", "parse_request",
    "pending_details", "read_submission", "tool_result_text",
]


class DingTalkAskUserQuestion(Tool):
    """Non-blocking: ``create`` returns at once with the pending text; the outcome reaches the
    agent as the ask.closed event's ``message`` (a new user turn, reference §9)."""

    name = NAME
    description = DESCRIPTION
    input_schema = INPUT_SCHEMA
    blocking = False
    default_timeout = timedelta(minutes=DEFAULT_TIMEOUT_MINUTES)
    call_timeout = False  # the reference's timeouts: 5 minutes, or the call's timeoutMinutes
    # parse_request checks the published schema itself, after the reference's own checks, so the
    # model reads the reference's error texts.
    schema_first = False
    replaces_older = True
    result_reads_responses = True

    def parse(self, arguments: Any) -> CreateRequest | ListRequest | CancelRequest:
        return parse_request(arguments)

    def refusal(self, error: str) -> str:
        return tool_result_text(failed_details(error))

    def unavailable(self) -> str:
        return tool_result_text(failed_details(NO_CONTEXT_ERROR))

    def failure_result(self, reason: str, *, ask_id: str, error: str = "") -> dict[str, Any]:
        if reason == "no_surface":
            return {"tool_result": tool_result_text(failed_details(NO_CONTEXT_ERROR, question_id=ask_id))}
        return {"tool_result": tool_result_text(failed_details(error))}

    def pending_result(self, request: AskRequest, *, ask_id: str, message_id: str,
                       deadline: datetime) -> dict[str, Any]:
        targeted = bool(request.target_type)
        timeout_minutes = request.timeout_minutes if isinstance(request, CreateRequest) else None
        details = pending_details(question_id=ask_id, out_track_id=message_id,
                                  deadline=deadline if targeted else None,
                                  timeout_minutes=timeout_minutes if targeted else None)
        return {"tool_result": tool_result_text(details)}

    def activation_lost_result(self, *, ask_id: str, message_id: str) -> str:
        return tool_result_text(failed_details(ACTIVATION_LOST_ERROR, question_id=ask_id, out_track_id=message_id))

    # ``check_answers`` stays the base's refusal: the seed's answer path (``ask_answer``) never
    # closes a form card; every answer to it goes through ``dingtalk_click``.

    def check_form(self, form_fields: list[dict[str, Any]], form: Any) -> CheckedForm:
        """A submitted form, from the card's callback or the web panel, in the card's value shapes
        (field name → value): the form to record, with what was dropped or kept at its default;
        FormRefused, what the person reads, when the card's form could not have sent it."""
        return check_form(form_fields, form)

    def close_result(self, closing: Closing) -> dict[str, Any]:
        """The responses, and the ``message`` the agent injects as a new user turn (reference §9)
        when the ending has one. The create call's ``tool_result`` is kept, so a retried call
        (same call_id) reads what the model read."""
        result: dict[str, Any] = {}
        if closing.kept_tool_result:
            result["tool_result"] = closing.kept_tool_result
        responses = [
            {
                "respondent_user_id": response.respondent_id,
                "status": "missing" if response.status == "pending" else response.status,
                "answers": list((response.answers or {}).get("answers", [])) if response.status == "submitted" else [],
            }
            for response in closing.responses
        ]
        result["responses"] = responses
        if not closing.target_type:
            first = responses[0] if responses else {"answers": []}
            message = answer_message(reason=closing.reason, question_id=closing.ask_id, title=closing.title,
                                     answers=first["answers"])
            if message is not None:
                result["message"] = message
            return result
        overall = COLLECTION_STATUS.get(closing.reason)
        if overall is None:
            return result
        collection = collection_result(question_id=closing.ask_id, title=closing.title, status=overall,
                                       target={"type": closing.target_type, "id": closing.target_id},
                                       responses=responses)
        result["collection"] = collection
        if closing.reason != "by_agent":
            # The initiator's own cancel returns the partial results in its tool result instead.
            result["message"] = collection_message(collection)
        return result


TOOL = DingTalkAskUserQuestion()
