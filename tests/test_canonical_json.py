"""One canonical JSON encoding (issue 14), and no key or signature changed by making it one.

``kbuild.cache`` (records, metadata digests, signatures) and ``kbuild.key`` (the content key) each had a
``canonical_json``; both now use :func:`kbuild.canonical.canonical_json`. The pins below were computed
with the two old functions before they were merged: a record and its signature with non-ASCII metadata, and a
key with non-ASCII components. The property tests hold the merged function to the two old definitions, written
out here as the oracle, on arbitrary JSON data (lone surrogates, huge integers and non-ASCII text included).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from property_helpers import json_values

from kbuild.cache.record import Artefact, check_signature, parse_record
from kbuild.canonical import canonical_json
from kbuild.key import digest

SECRET = "s3cret-ünicode"
META = {"kernel": "add_ядро", "target": "sm_90a", "created_at": "2024-01-02T03:04:05Z", "kbuild_version": "0.0.0",
        "schedule_diff": ["  FFMA R1, R2, R3 → moved ≥ 2"], "speedup": 1.25, "seed": 0,
        "nested": {"b": [1, 2.5, None, True], "a": "é\u0000\"\\"}, "gpu_name": "NVIDIA H200", "emoji": "\U0001f680"}
ART = Artefact.create(key="ab" * 32, cubin=b"\x7fELF" + bytes(range(256)), meta=META)

#: Written by kbuild before the merge (``Artefact.record(SECRET)`` of ``ART``), byte for byte.
SIGNED_RECORD = (
    b'{"cubin_sha256":"d5cd2defadd8871a553fa540176d5bb8d8c278d24c32a325f06300cb2fb530d7","cubin_size":260,'
    b'"format":"kbuild-artefact/1","key":"abababababababababababababababababababababababababababababababab",'
    b'"meta":{"created_at":"2024-01-02T03:04:05Z","emoji":"\xf0\x9f\x9a\x80","gpu_name":"NVIDIA H200",'
    b'"kbuild_version":"0.0.0","kernel":"add_\xd1\x8f\xd0\xb4\xd1\x80\xd0\xbe","nested":{"a":"\xc3\xa9\\u0000\\"\\\\",'
    b'"b":[1,2.5,null,true]},"schedule_diff":["  FFMA R1, R2, R3 \xe2\x86\x92 moved \xe2\x89\xa5 2"],"seed":0,'
    b'"speedup":1.25,"target":"sm_90a"},"meta_sha256":"d3a05dde4e75ef345fe66b111698926aeebe5e7fa495398b2fa709aadd3a8ccf",'
    b'"signature":"hmac-sha256:6f353b9cc63a7469bc237256338adfba9ac025d72894c3ba54b9c34666ea901c"}'
)


def test_records_and_signatures_are_those_written_before():
    assert ART.meta_sha256 == "d3a05dde4e75ef345fe66b111698926aeebe5e7fa495398b2fa709aadd3a8ccf"
    assert ART.record(SECRET) == SIGNED_RECORD
    assert hashlib.sha256(SIGNED_RECORD).hexdigest() == "0d877be223a8d7341d31e1aa65c28601cec7df452582d113b1236a3f71881f7d"
    assert hashlib.sha256(ART.record()).hexdigest() == "43976fc98f49167724003311351a16a323114bc1f045faecc7d009a0e57b99eb"


def test_a_record_signed_before_still_verifies():
    record = parse_record(ART.key, SIGNED_RECORD)
    check_signature(record, SECRET)
    assert record.meta == ART.meta and record.meta_sha256 == ART.meta_sha256


def test_keys_with_non_ascii_components_are_those_computed_before():
    components = {"schema": 1, "tuner": None, "s": "\ud800",
                  "kernel": {"function": "ядро", "source_hash": "00" * 32, "constexprs": {"MODE": "é", "X": 1.5}}}
    assert digest(components) == "3029376622247d917254f953fa2990f5e0283783f4d5300f9802b34e36a234c6"


# --- the two old definitions, as the oracle ---------------------------------------------------------

def old_store_encoding(value: Any) -> bytes:
    """``kbuild.cache.store.canonical_json`` before the merge."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def old_key_encoding(value: Any) -> bytes:
    """``kbuild.key.canonical_json`` before the merge, as the bytes the key hashed."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def outcome(encode: Any, value: Any) -> bytes | type[Exception]:
    try:
        return encode(value)
    except ValueError as exc:  # NaN, infinities, a lone surrogate in UTF-8
        return ValueError if type(exc) in (ValueError, UnicodeEncodeError) else type(exc)


ANY_JSON = json_values(finite=False, unicode=False) | json_values(finite=True, unicode=True)


@settings(max_examples=300, deadline=None)
@given(ANY_JSON)
def test_the_record_spelling_is_the_old_store_encoding(value: Any):
    assert outcome(canonical_json, value) == outcome(old_store_encoding, value)


@settings(max_examples=300, deadline=None)
@given(ANY_JSON)
def test_the_key_spelling_is_the_old_key_encoding(value: Any):
    assert outcome(lambda v: canonical_json(v, ascii_only=True), value) == outcome(old_key_encoding, value)


@settings(max_examples=300, deadline=None)
@given(json_values(unicode=True))
def test_the_two_spellings_agree_on_ascii_data(value: Any):
    """They differ only in how characters outside printable ASCII are written: non-ASCII ones, and DEL (U+007F),
    which the ASCII spelling escapes and UTF-8 writes as it is (found by this test in CI)."""
    utf8 = canonical_json(value)
    if utf8.isascii() and b"\x7f" not in utf8:
        assert canonical_json(value, ascii_only=True) == utf8
    else:
        assert json.loads(canonical_json(value, ascii_only=True)) == json.loads(utf8)


@pytest.mark.parametrize("bad", [math.nan, math.inf, {"x": [-math.inf]}])
def test_non_finite_numbers_have_no_canonical_form(bad: Any):
    for ascii_only in (False, True):
        with pytest.raises(ValueError):
            canonical_json(bad, ascii_only=ascii_only)


def test_there_is_one_definition():
    """No second ``canonical_json`` anywhere in kbuild's source (the store and the key each had one)."""
    import ast

    from test_layering import modules_under, package_dirs

    found = sorted(mod for package in package_dirs() for mod, path in modules_under(package).items()
                   for node in ast.walk(ast.parse(path.read_text(), str(path)))
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "canonical_json")
    assert found == ["kbuild.canonical"]


def test_the_key_and_the_store_stand_on_it_without_loading_each_other():
    """The content key does not load the store (kbuild.runtime imports the key in users' processes), and the
    store knows nothing of keys; both import the one encoding."""
    from test_layering import closure, modules_under

    key = closure("kbuild.key")
    assert "kbuild.canonical" in key and not [m for m in key if m.startswith("kbuild.cache")]
    store = set().union(*(closure(m) for m in modules_under("kbuild.cache")))
    assert "kbuild.canonical" in store and "kbuild.key" not in store
