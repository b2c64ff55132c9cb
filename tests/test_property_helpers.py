"""The TOML writer of tests/property_helpers.py, checked against tomllib: what it writes is what tomllib reads.

The lock-file property tests feed arbitrary JSON data through it; JSON has null and TOML has none, and a
``None`` used to crash the writer inside the generator (test_parse_lock, test_read_lock).
"""

from __future__ import annotations

from typing import Any

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st
from property_helpers import KEYS, json_values, same, toml_document, toml_value, without_none


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, json_values(finite=False) | st.dates(), max_size=6))
def test_what_the_writer_writes_tomllib_reads_back(table: dict[str, Any]):
    for header in (None, "tool.kbuild"):
        parsed = tomllib.loads(toml_document(table, header))
        if header:
            parsed = parsed["tool"]["kbuild"]
        assert same(parsed, without_none(table))


def test_none_is_left_out_as_toml_has_no_null():
    table = {"version": 1, "gone": None, "kernels": {"add": {"key": None, "list": [1, None, {"x": None}]}}}
    assert tomllib.loads(toml_document(table, None)) == {"version": 1, "kernels": {"add": {"list": [1, {}]}}}
    with pytest.raises(ValueError, match="no null"):
        toml_value(None)
