"""Hypothesis strategies shared by the security fuzz tests: hostile JSON and the attack shapes
every edge must refuse cleanly (deep nesting, NUL, lone surrogates, huge strings, odd numbers)."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Bounded: the whole of tests/security/ runs in well under a minute (about 15 s on SQLite, 25 s on
# PostgreSQL once nothing fails; a failure adds Hypothesis' shrinking).
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ_SOCKET = settings(FUZZ, max_examples=40)  # each example opens a socket of its own

DEPTH = 5000  # well past Python's recursion limit: json.loads raises RecursionError
NASTY_TEXT = ["\x00", "a\x00b", "\ud800", "x\udfffy", "\ufeff", "\u202e", "", " ", "9" * 5000, "nan", "NaN", "-1",
              "1e999", "0x10", "<script>", "' OR 1=1 --", "../../etc/passwd", "null"]
HUGE = "長" * 100_000  # 600 KB as \\u escapes: under the 1 MB callback bound even encrypted

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | st.sampled_from(NASTY_TEXT)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def deep(depth: int = DEPTH, inner: str = "1") -> str:
    """JSON text nested ``depth`` arrays deep (written out: json.dumps itself would recurse)."""
    return "[" * depth + inner + "]" * depth


def deep_object(depth: int = DEPTH) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def dumps(value) -> str:
    """JSON text as a client would send it; lone surrogates survive as \\u escapes."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


class Raw(str):
    """Already JSON text, inserted verbatim by ``render`` (deep nesting, NaN, huge numbers)."""

    def __repr__(self) -> str:
        return short_repr(self)


class Text(str):
    """A request body or payload text whose repr in a failure report stays readable."""

    def __repr__(self) -> str:
        return short_repr(self)


class Bytes(bytes):
    def __repr__(self) -> str:
        return short_repr(self)


def short_repr(value) -> str:
    text = repr(value.__class__.__mro__[1](value))
    return text if len(text) <= 160 else f"{text[:120]}…{text[-30:]} ({len(value)} long)"


def render(value) -> str:
    """Like ``dumps``, but ``Raw`` values are spliced in as they are."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(str(key))}:{render(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(item) for item in value) + "]"
    return dumps(value)


raw_json_fragments = st.sampled_from(
    [Raw(deep()), Raw(deep_object()), Raw("NaN"), Raw("-Infinity"), Raw("1e999"), Raw("9" * 5000), Raw('"\\ud800"'),
     Raw('"\\u0000"'), Raw(dumps(HUGE))]
)
# Any JSON value, sometimes with an attack fragment somewhere inside.
hostile_values = st.recursive(
    scalars | raw_json_fragments,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)

raw_bodies = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(lambda text: text.encode("utf-8", "surrogatepass")),
    hostile_values.map(lambda value: render(value).encode()),
    st.sampled_from([
        deep().encode(), deep_object().encode(), b"", b"{", b"\x00", b'{"encrypt": ' + deep().encode() + b"}",
        b'{"encrypt": "\\u0000"}', b'{"encrypt": "' + b"A" * 5000 + b'"}',
    ]),
).map(Bytes)
header_text = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=40),
    st.sampled_from(["", "nan", "inf", "-inf", "1e999", "9" * 30, "0", "-1", " 1 "]),
)
