"""JSON bodies decoded with limits: every refusal is a BadJson (a 400), never another exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.serve.json_body import MAX_DEPTH, MAX_INT_DIGITS, BadJson, decode_body


def test_an_integer_of_4301_digits_is_refused_naming_its_size():
    with pytest.raises(BadJson, match="4301 digits"):
        decode_body(b'{"prompt": "hi", "seed": ' + b"9" * 4301 + b"}")
    with pytest.raises(BadJson):
        decode_body(b"-" + b"1" * (MAX_INT_DIGITS + 1))
    assert decode_body(b'{"seed": ' + str(2**70).encode() + b"}") == {"seed": 2**70}  # a range error later


def test_a_lone_surrogate_is_refused_with_the_field_it_is_in():
    with pytest.raises(BadJson) as e:
        decode_body(b'{"prompt": "hi", "stop": ["ok", "\\ud800"]}')
    assert e.value.param == "stop" and "surrogate" in e.value.message
    with pytest.raises(BadJson) as e:
        decode_body(b'{"messages": [{"role": "user", "content": "\\udfff"}]}')
    assert e.value.param == "messages"
    assert decode_body(b'{"prompt": "\\ud83d\\ude00"}') == {"prompt": "\U0001f600"}  # a pair is fine


def test_depth_and_malformed_bodies_are_refused():
    with pytest.raises(BadJson, match="nested"):
        decode_body(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(BadJson, match="nested"):
        decode_body(b"[" * 100_000)
    for raw in (b"{", b"\xff\xfe", b"", b"[1,]"):
        with pytest.raises(BadJson):
            decode_body(raw)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_what_json_dumps_writes_decodes_back_or_is_refused(value):
    raw = json.dumps(value).encode()
    try:
        assert decode_body(raw) == value
    except BadJson as e:  # a lone surrogate from st.text(), or a too-long integer
        assert e.message and "\n" not in e.message


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | st.text(max_size=64).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_arbitrary_bytes_decode_or_are_refused(raw):
    try:
        decode_body(raw)
    except BadJson as e:
        assert "\n" not in e.message
