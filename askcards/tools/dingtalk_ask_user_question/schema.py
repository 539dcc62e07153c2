"""What ``dingtalk_ask_user_question`` publishes: its name, description, input schema and limits
(reference/dingtalk-plugin.md §2)."""
from __future__ import annotations

from typing import Any

NAME = "dingtalk_ask_user_question"

DEFAULT_TIMEOUT_MINUTES = 5
MAX_TIMEOUT_MINUTES = 1440
MAX_RESPONDENTS = 50
MAX_ID_LENGTH = 256

FIELD_TYPES = (
    "TEXT", "TEXT_ARRAY", "TEXT_AREA", "NUMBER", "SELECT", "MULTI_SELECT", "DATE", "TIME", "DATETIME",
    "CHECKBOX", "SWITCH", "CHECKBOX_GROUP", "MULTI_CHECKBOX_GROUP",
)
OPTION_TYPES = frozenset({"SELECT", "MULTI_SELECT", "CHECKBOX_GROUP", "MULTI_CHECKBOX_GROUP"})

DESCRIPTION = (
    "Ask the person you are talking to (or named colleagues) a question through an interactive DingTalk "
    "form card when the task cannot continue without their confirmation, choice or structured input. "
    "The call returns immediately with status \"pending\"; the answer arrives later as a new message in "
    "this conversation. Do NOT poll or re-call this tool - just wait for the response message.\n"
    "Use `questions` only for a simple confirmation, single choice, multiple choice or short free text "
    "(options [] = free text; use two options for a confirmation). Use top-level `fields` when you "
    "collect several values or the user asks for a form, instead of a markdown checklist; give each field "
    "a readable label (e.g. label \"测试代号\" for name \"code\"). Do not use this tool for explanations, "
    "why/how questions or to introduce your capabilities.\n"
    "Targeted collections: set `target` with verified DingTalk IDs (never guessed from names) to ask "
    "another person (type user, their staffId) or named members of a group (type group, the raw "
    "conversationId and 1-50 respondentUserIds). Each respondent's first answer counts; the results come "
    "back to this conversation once everyone responded or at the deadline (timeoutMinutes, 1-1440, "
    "default 5; targeted only). Targeted collections survive ordinary chat, new forms and restarts. "
    "`action`=\"list\" shows your pending targeted collections; `action`=\"cancel\" with a `questionId` "
    "from create or list stops one and returns the partial results directly."
)

_QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["question", "header", "options"],
    "properties": {
        "question": {"type": "string", "description": "The question text."},
        "header": {"type": "string", "description": "Short label (max 12 chars)."},
        "options": {
            "type": "array",
            "maxItems": 20,
            "description": "Choices; [] makes a free-text answer. Use two options for confirmation.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["label"],
                "properties": {
                    "label": {"type": "string"},
                    "value": {"type": "string"},
                    "description": {"type": "string"},
                },
            },
        },
        "multiSelect": {"type": "boolean", "description": "Allow several options. Ignored without options."},
    },
}

_FIELD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "label", "type"],
    "properties": {
        "name": {"type": "string", "description": "Unique key of the field."},
        "label": {
            "type": "string",
            "description": "Human label, also used in result summaries (e.g. 测试代号 instead of code).",
        },
        "type": {"type": "string", "enum": list(FIELD_TYPES)},
        "hidden": {"type": "boolean"},
        "required": {"type": "boolean"},
        "requiredMsg": {"type": "string"},
        "readOnly": {"type": "boolean"},
        "placeholder": {"type": "string"},
        "defaultValue": {},
        "defautValue": {"description": "Compatibility alias for DingTalk form protocol documentation typo."},
        "options": {
            "type": "array",
            "description": "Required for SELECT, MULTI_SELECT, CHECKBOX_GROUP, MULTI_CHECKBOX_GROUP.",
            "items": {
                "type": "object",
                "required": ["value", "text"],
                "properties": {"value": {"type": "string"}, "text": {"type": "string"}},
            },
        },
        "minRows": {"type": "number"},
        "maxRows": {"type": "number"},
        "addText": {"type": "string"},
    },
}

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {
            "type": "string",
            "enum": ["create", "list", "cancel"],
            "default": "create",
            "description": "List your pending targeted collections or cancel one by questionId from its "
            "initiating conversation.",
        },
        "questionId": {
            "type": "string",
            "minLength": 1,
            "description": "Required for cancel. Use an ID returned by create or list; never guess.",
        },
        "timeoutMinutes": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TIMEOUT_MINUTES,
            "description": "Targeted only; default 5. The collection ends early when everyone replied.",
        },
        "target": {
            "type": "object",
            "additionalProperties": False,
            "required": ["type", "id"],
            "description": "Optional explicit delivery target.",
            "properties": {
                "type": {"type": "string", "enum": ["user", "group"]},
                "id": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Raw staffId for user, raw conversationId for group (no prefixes).",
                },
                "respondentUserIds": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_RESPONDENTS,
                    "uniqueItems": True,
                    "items": {"type": "string", "minLength": 1},
                    "description": "Required for group: staffIds allowed to submit. Omit for user. "
                    "No wildcard/public forms.",
                },
            },
        },
        "title": {"type": "string", "description": "Card title; used with fields (omitted: first field label)."},
        "description": {"type": "string", "description": "Short text above the form; used with fields."},
        "questions": {
            "type": "array",
            "minItems": 1,
            "maxItems": 6,
            "description": "Light question DSL (1-6).",
            "items": _QUESTION_SCHEMA,
        },
        "fields": {
            "type": "array",
            "minItems": 1,
            "maxItems": 20,
            "description": "Raw DingTalk form fields (1-20).",
            "items": _FIELD_SCHEMA,
        },
    },
    "anyOf": [
        {
            "properties": {"action": {"const": "create"}},
            "not": {"required": ["questionId"]},
            "oneOf": [{"required": ["questions"]}, {"required": ["fields"]}],
        },
        {"properties": {"action": {"const": "list"}}, "required": ["action"]},
        {"properties": {"action": {"const": "cancel"}}, "required": ["action", "questionId"]},
    ],
}
