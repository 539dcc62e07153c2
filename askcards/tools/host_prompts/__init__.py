"""What a host's prompt becomes on askcards' surfaces, whatever the host: an approval (允许 / 拒绝
with a reason / 本会话内允许) or the host's own questions, as ``ask_user_questions`` arguments, and
the person's answer read back off that ask.

An approval shows what the tool wants to do the way a person can judge it: the command, the file
and a bounded excerpt of an edit, the URL of a fetch, an MCP tool and its arguments. The host, its
working directory and its session id head the question, so a person answering from a phone knows
which terminal is asking.

Its parts: ``prompt`` (the prompt, the answer, the bounds and excerpts every kind shares),
``approvals`` (a tool's approval, the host's own questions), ``elicitations`` (an MCP server's
request for input), ``forms`` (any of them as a DingTalk form).
"""
from .approvals import answers_by_question, approval, describe_suggestions, describe_tool, diff, host_questions
from .elicitations import (DECLINE, EMPTY, HEADER_MAX, MAX_CHOICES, MAX_FIELDS, NO, RESPONSE_CHECK, RESPONSE_QUESTION,
                           SUBMIT, TEXT_TYPES, WRITE, YES, elicitation, elicitation_content)
from .forms import OTHER, answers_from_form, dingtalk_checks, dingtalk_form
from .prompt import (ALLOW, ALLOW_SESSION, DENY, DESCRIPTION_MAX, EXCERPT_CHARS, HEADER, QUESTION_ITEM, QUESTION_MAX,
                     Answer, Field, HostEventError, Progress, Prompt, context_line, excerpt, summary)

__all__ = [
    "ALLOW", "ALLOW_SESSION", "DECLINE", "DENY", "DESCRIPTION_MAX", "EMPTY", "EXCERPT_CHARS", "HEADER", "HEADER_MAX",
    "MAX_CHOICES", "MAX_FIELDS", "NO", "OTHER", "QUESTION_ITEM", "QUESTION_MAX", "RESPONSE_CHECK", "RESPONSE_QUESTION",
    "SUBMIT", "TEXT_TYPES", "WRITE", "YES", "Answer", "Field", "HostEventError", "Progress", "Prompt",
    "answers_by_question", "answers_from_form", "approval", "context_line", "describe_suggestions", "describe_tool",
    "diff", "dingtalk_checks", "dingtalk_form", "elicitation", "elicitation_content", "excerpt", "host_questions",
    "summary",
]
