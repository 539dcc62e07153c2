"""The one way askcards reads JSON from outside: bounded in size and nesting, text it can store.

Every parse of outside input (platform callbacks, DingTalk Stream frames, the agent API, the panel
socket) goes through ``load``; entries that are handed already-decoded values use ``check_text``.
Both raise ``JSONRefused`` (a ``ValueError``) with a message saying what was wrong and never the
offending content.

Why these rules:

- **Size** before anything else: every caller names its own bound (``MAX_BYTES`` by default).
- **Depth** ``MAX_DEPTH = 64``: the deepest payload askcards reads is a Feishu callback (envelope →
  event → action → form_value → a multi-select list), about 6 levels; tool arguments are about 5.
  64 leaves room for any honest sender, while everything that later walks the value recursively —
  ``json.loads`` itself (C recursion, RecursionError near 1000 levels), jsonschema, Django's JSONField
  encoder, our own renderers — stays far below Python's recursion limit. The depth is measured by a
  linear scan of the text *before* parsing, so a body of 20,000 ``[`` never reaches the recursive
  parser, and nothing here recurses.
- **Text**: PostgreSQL stores no U+0000 in text or jsonb, and a lone UTF-16 surrogate
  (U+D800–U+DFFF, from an escape such as ``\\ud800``) is not Unicode at all: no UTF-8 column,
  log line or response can carry it. SQLite would take both, so refusing them at the edge is what
  makes every database behave the same. Object keys are checked like values.
- **Numbers**: ``NaN``/``Infinity`` and overflowing literals such as ``1e999`` are not JSON
  (RFC 8259) and PostgreSQL's jsonb refuses them; they are refused here too.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

MAX_BYTES = 1024 * 1024  # platform callbacks are a few KB; callers with other needs pass their own
MAX_DEPTH = 64

# A JSON string, or an unterminated one running to the end of the text. Matching the unterminated
# case too keeps the scan linear: re.sub never restarts inside a string it could not close.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


CODES = ("malformed_json", "too_large", "too_deep", "invalid_text")


class JSONRefused(ValueError):
    """Outside JSON askcards will not read. ``code``: malformed_json | too_large | too_deep | invalid_text."""

    def __init__(self, message: str, *, code: str):
        super().__init__(message)
        self.code = code


def load(data: str | bytes | bytearray, *, what: str, max_bytes: int = MAX_BYTES,
         max_depth: int = MAX_DEPTH, text: bool = True) -> Any:
    """Parse ``data`` (UTF-8 bytes or text) as JSON within the limits; raise ``JSONRefused``.

    ``what`` names the input in messages ("callback body"). ``text=False`` skips ``check_text``
    for callers that check the parts they use themselves (a transport frame wrapping a payload).
    """
    if len(data) > max_bytes:  # characters of a str are at least one byte each
        raise JSONRefused(f"{what} is larger than {max_bytes} bytes", code="too_large")
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise JSONRefused(f"{what} is not valid JSON (not UTF-8 text)", code="malformed_json") from None
    if len(data.encode("utf-8", "surrogatepass")) > max_bytes:
        raise JSONRefused(f"{what} is larger than {max_bytes} bytes", code="too_large")
    if _depth(data) > max_depth:
        raise JSONRefused(f"{what} is nested deeper than {max_depth} levels", code="too_deep")
    try:
        value = json.loads(data, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise JSONRefused(f"{what} is not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})",
                          code="malformed_json") from None
    except (ValueError, RecursionError):  # a number out of range; RecursionError cannot pass _depth
        raise JSONRefused(f"{what} is not valid JSON (NaN, Infinity and out-of-range numbers are not JSON numbers)",
                          code="malformed_json") from None
    if text:
        check_text(value, what)
    return value


def check_text(value: Any, what: str) -> None:
    """Raise ``JSONRefused`` when a string (an object key too) inside ``value`` holds U+0000 or a
    lone surrogate; the message names where. Walks iteratively, so any depth is safe."""
    for where, string in _strings(value, what):
        match = _UNSTORABLE.search(string)
        if match:
            found = "a NUL character (U+0000)" if match.group() == "\x00" else "a lone UTF-16 surrogate"
            raise JSONRefused(f"{where} contains {found}; text must be valid Unicode without NUL",
                              code="invalid_text")


def _strings(value: Any, what: str) -> Iterator[tuple[str, str]]:
    stack: list[tuple[Any, str]] = [(value, what)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    yield f"{where} (a key)", key
                    name = key if key.isprintable() and len(key) <= 64 else "…"
                    stack.append((child, f"{where}.{name}"))
                else:
                    stack.append((child, where))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))


_KINDS = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def kind(value: Any) -> str:
    """What a decoded JSON value is, for messages: "an array", "null", …"""
    return "null" if value is None else _KINDS.get(type(value), type(value).__name__)


def _depth(text: str) -> int:
    """The deepest bracket nesting outside strings: the recursion ``json.loads`` would need."""
    if text.count("[") + text.count("{") == 0:
        return 0
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError("number out of range")
    return number
