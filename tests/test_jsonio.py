"""kbuild.jsonio: the safe JSON loader — exactly the caller's error class for every bad document."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_helpers import json_values

from kbuild.errors import BundleError, UsageError
from kbuild.jsonio import DEFAULT_MAX_DEPTH, load_json, read_json_file

DEEP = 100_000


def test_valid_documents_load():
    assert load_json(b'{"a": [1, 2.5, "x", null, true]}', where="f") == {"a": [1, 2.5, "x", None, True]}
    assert load_json("[]", where="f") == []
    assert load_json("[" * (DEFAULT_MAX_DEPTH - 1) + "]" * (DEFAULT_MAX_DEPTH - 1), where="f") is not None


@pytest.mark.hostile(fault="deep JSON", outcome="clean error")
@pytest.mark.parametrize("doc", [
    pytest.param("[" * DEEP + "]" * DEEP, id="array-100000"),
    pytest.param('{"a":' * DEEP + "1" + "}" * DEEP, id="object-100000"),
    pytest.param("[" * DEEP, id="unterminated-100000"),
    pytest.param("[" * 500 + "]" * 500, id="array-500"),
    pytest.param('{"kernels": [' + "[" * 70 + "]" * 70 + "]}", id="inner-70"),
])
def test_deep_nesting_is_the_callers_error(doc: str):
    with pytest.raises(BundleError, match=r"^bundle\.tar: not valid JSON \(nested deeper than 64 levels"):
        load_json(doc, where="bundle.tar", error=BundleError)


@pytest.mark.hostile(fault="non-finite number", outcome="clean error")
@pytest.mark.parametrize(("doc", "reason"), [
    ('{"speedup": NaN}', "NaN is not a JSON number"), ('[-Infinity]', "-Infinity is not a JSON number"),
    ('{"a": [1e400]}', "non-finite number at a[0]"), ('{"a b": -1e999}', 'non-finite number at ["a b"]'),
])
def test_non_finite_numbers_are_refused(doc: str, reason: str):
    with pytest.raises(UsageError) as err:
        load_json(doc, where="m.json")
    assert str(err.value).startswith(f"m.json: not valid JSON ({reason}")


@pytest.mark.hostile(fault="bad JSON string", outcome="clean error")
@pytest.mark.parametrize("doc", ['"\\ud800"', '{"\\udfff": 1}', '["ok", {"k": "x\\ud83d"}]'])
def test_lone_surrogates_are_refused(doc: str):
    with pytest.raises(UsageError, match="not valid Unicode"):
        load_json(doc, where="m.json")


@pytest.mark.hostile(fault="oversized JSON", outcome="clean error")
def test_size_limit(tmp_path: Path):
    with pytest.raises(UsageError, match="over the 10-byte limit"):
        load_json(b"[" + b"1," * 10 + b"1]", where="m.json", max_bytes=10)
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"0," * 1000 + b"0]")
    with pytest.raises(UsageError, match=r"big\.json: over the 100-byte limit"):
        read_json_file(big, max_bytes=100)
    assert len(read_json_file(big)) == 1001
    with pytest.raises(UsageError, match="cannot read"):
        read_json_file(tmp_path / "missing.json")
    with pytest.raises(UsageError, match="cannot read"):
        read_json_file(tmp_path)


def test_messages_are_one_line_and_name_the_path():
    with pytest.raises(UsageError) as err:
        load_json('{"x\\n\\u001b[31m": [NaN]}', where="w")
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)
    with pytest.raises(UsageError) as err:
        load_json('{"x\\n\\u001b[31m": [1e999]}', where="w")
    assert str(err.value) == 'w: not valid JSON (non-finite number at ["x\\n\\u001b[31m"][0])'


@pytest.mark.hostile(fault="malformed JSON", outcome="clean error")
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_give_a_value_or_the_callers_error(data: bytes):
    try:
        load_json(data, where="x")
    except UsageError as exc:
        assert type(exc) is UsageError and str(exc).startswith("x: ")


@pytest.mark.hostile(fault="malformed JSON", outcome="clean error")
@settings(max_examples=200, deadline=None)
@given(json_values(finite=False, unicode=False))
def test_any_json_value_round_trips_or_is_refused(value):
    doc = json.dumps(value)  # NaN/Infinity and lone surrogates (escaped) included
    try:
        loaded = load_json(doc, where="x")
    except UsageError as exc:
        assert "non-finite" in str(exc) or "NaN" in str(exc) or "Infinity" in str(exc) or "Unicode" in str(exc)
        return
    assert json.dumps(loaded) == doc
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in _leaves(loaded))


def _leaves(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        else:
            yield v
