"""Hypothesis strategies shared by the property tests of issue 13 (imported by name: tests/ is on sys.path).

* :func:`json_values` — arbitrary JSON-like data (optionally with NaN/Infinity and lone surrogates);
* :func:`mutated` — a valid document with a few random edits (a subtree replaced, a key deleted or added),
  which reaches the checks past the first "is this a table" far more often than random data does;
* :func:`deep_json` — documents nested 100,000 levels deep, which make ``json.loads`` raise RecursionError.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

DEEP = 100_000

KEYS = st.sampled_from(["", "a", "key", "kernels", "format", "-", "a b", "ñ", "\x1b[31m", "a\nb"]) | st.text(max_size=8)


def json_values(*, finite: bool = True, unicode: bool = True, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON data: null, booleans, integers (some huge), floats, strings, arrays and objects."""
    floats = st.floats(allow_nan=not finite, allow_infinity=not finite)
    text = st.text(alphabet=st.characters(exclude_categories=("Cs",) if unicode else ()), max_size=16)
    scalars = (st.none() | st.booleans() | st.integers() | st.sampled_from([0, -1, 2**63, 10**30]) | floats | text
               | st.sampled_from(["0" * 64, "a" * 64, "sm_90", "kbuild-artefact/1", "../../etc/passwd", "\x1b[2J"]))
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
