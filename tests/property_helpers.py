"""Hypothesis strategies shared by the property tests of issue 13 (imported by name: tests/ is on sys.path).

* :func:`json_values` — arbitrary JSON-like data (optionally with NaN/Infinity and lone surrogates);
* :func:`mutated` — a valid document with a few random edits (a subtree replaced, a key deleted or added),
  which reaches the checks past the first "is this a table" far more often than random data does;
* :func:`deep_json` — documents nested 100,000 levels deep, which make ``json.loads`` raise RecursionError.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
from typing import Any

from hypothesis import strategies as st

DEEP = 100_000

KEYS = st.sampled_from(["", "a", "key", "kernels", "format", "-", "a b", "ñ", "\x1b[31m", "a\nb"]) | st.text(max_size=8)


def json_values(*, finite: bool = True, unicode: bool = True, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON data: null, booleans, integers (some huge), floats, strings, arrays and objects."""
    floats = st.floats(allow_nan=not finite, allow_infinity=not finite)
    text = st.text(alphabet=st.characters(exclude_categories=["Cs"] if unicode else []), max_size=16)
    scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from([0, -1, 2**63, 10**30]) | floats | text
               | st.sampled_from(["0" * 64, "a" * 64, "sm_90", "kbuild-artefact/1", "../../etc/passwd", "\x1b[2J"]))
    if not unicode:  # hypothesis draws lone surrogates rarely on its own; JSON can carry them as \ud800
        text = text | st.sampled_from(["\ud800", "a\udfffb", "\udc00\ud800"])
        scalars = scalars | text
    keys = KEYS if unicode else KEYS | text
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                        max_leaves=max_leaves)


def _slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key-or-index) in ``doc``, the top level as (None, None)."""
    out: list[tuple[Any, Any]] = [(None, None)]
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                out.append((node, k))
                stack.append(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                out.append((node, i))
                stack.append(v)
    return out


@st.composite
def mutated(draw: st.DrawFn, base: Any, values: st.SearchStrategy[Any] | None = None, *, max_edits: int = 3) -> Any:
    """``base`` (deep-copied) with 0 to ``max_edits`` random edits."""
    values = values if values is not None else json_values()
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, max_edits))):
        container, key = draw(st.sampled_from(_slots(doc)))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if container is None:
            if action == "replace":
                doc = draw(values)
            continue
        if action == "replace":
            container[key] = draw(values)
        elif action == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(KEYS)] = draw(values)
        else:
            container.insert(draw(st.integers(0, len(container))), draw(values))
    return doc


def deep_json() -> st.SearchStrategy[str]:
    """Text nested ~100,000 levels deep (arrays, objects, unterminated), optionally inside a valid prefix."""
    return st.sampled_from([
        "[" * DEEP + "]" * DEEP,
        '{"a":' * DEEP + "1" + "}" * DEEP,
        "[" * DEEP,
        '{"format": "x", "kernels": ' + "[" * DEEP + "]" * DEEP + "}",
        "[" * 3000 + "]" * 3000,
    ])


# --- TOML writer (checked against tomllib: tests/test_property_helpers.py, and on every example by the
# config property tests) --------------------------------------------------------------------------
#
# TOML has no null. A ``None`` in the data is written the only way TOML can say "no value": the key (or the
# array item) is left out. A reader given such a document sees the key missing, which the edits of
# :func:`mutated` also produce by deleting it; everything else JSON can hold is written as it is.

def toml_key(key: str) -> str:
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return key
    return toml_string(key)


def toml_string(value: str) -> str:
    # JSON's escapes are TOML's, except that TOML also wants DEL escaped.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (``None`` items and keys inside it are left out; ``None`` itself is no value)."""
    if value is None:
        raise ValueError("TOML has no null: leave the key or item out")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None) + "}"
    raise TypeError(f"no TOML value for {type(value).__name__}")


def toml_document(table: dict[str, Any], header: str | None = "tool.kbuild") -> str:
    """``table`` as a TOML document (under ``[header]``); nested tables are written inline, ``None`` left out."""
    head = f"[{header}]\n" if header else ""
    return head + "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in table.items() if v is not None)


def without_none(value: Any) -> Any:
    """``value`` as :func:`toml_document` writes it: every ``None`` key and item left out."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(v) for v in value if v is not None]
    return value


def same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to itself and types compared (True is not 1)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b
