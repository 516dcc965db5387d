"""perfgate._json: any text is a value or one JSONInputError, never a RecursionError or a silent pick."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate._json import MAX_DEPTH, JSONInputError, JSONSyntaxError, loads

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300)
@given(value=values)
def test_what_json_writes_is_read_back(value: Any) -> None:
    assert loads(json.dumps(value)) == value


@settings(max_examples=500)
@given(text=st.text(alphabet='[]{}":,0123456789eE.-\\ aNInfity', max_size=300))
def test_any_text_is_a_value_or_one_error(text: str) -> None:
    try:
        loads(text)
    except JSONInputError:
        pass


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested 100,000 levels deep (at most 64 are read)"),
        ('{"a": ' * 65 + "1" + "}" * 65, f"nested 65 levels deep (at most {MAX_DEPTH} are read)"),
        ("[" + "9" * 5000 + "]", "a number of 5,000 digits (at most 100 are read)"),
        ('{"output_throughput": 5000.0, "output_throughput": 1.0}', "the key 'output_throughput' twice in one object"),
        ('{"x": [1, NaN]}', "NaN, which is no JSON number"),
        ('{"x": -Infinity}', "-Infinity, which is no JSON number"),
    ],
)
def test_what_would_crash_or_mislead_is_one_error(text: str, why: str) -> None:
    with pytest.raises(JSONInputError) as err:
        loads(text)
    assert str(err.value).startswith(why) and not isinstance(err.value, JSONSyntaxError)


def test_brackets_and_digits_inside_strings_are_text() -> None:
    text = json.dumps({"a": "[" * 1000 + "9" * 1000, 'b\\"[': "\\"})
    assert loads(text) == json.loads(text)


def test_without_strict_a_trace_may_repeat_keys_and_hold_nan() -> None:
    assert loads(b'{"a": 1, "a": NaN}', strict=False)["a"] != 1


def test_text_that_is_not_json_is_a_syntax_error() -> None:
    for text in ('{"traceEvents": [', b"\xff", ""):
        with pytest.raises(JSONSyntaxError, match=r"^not valid JSON \("):
            loads(text)


def test_an_unterminated_string_of_escaped_quotes_is_read_in_linear_time() -> None:
    # Each of its quotes started a new try at a string running to the end: 40 KB took 10 s.
    start = time.monotonic()
    with pytest.raises(JSONSyntaxError):
        loads('["' + '\\"' * 500_000)
    assert time.monotonic() - start < 5
