"""The byte encodings kbuild hashes and signs: canonical JSON, and its bounded parser.

:func:`canonical_json` is the one encoding of JSON data for digests and signatures: the store's
records, metadata digests and signatures (:mod:`kbuild.cache.record`). Changing its output
invalidates every signature, so it is pinned by a test (``tests/cache/test_store_record.py``).

This module imports nothing of kbuild.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Deepest nesting of arrays and objects accepted in any JSON kbuild reads (records, metadata,
#: manifests). The pipeline's metadata nests a few levels; Python's parser and encoder recurse once
#: per level, so without a bound a hostile document ends in a RecursionError instead of a message.
MAX_JSON_DEPTH = 64


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of JSON data: keys sorted, no whitespace, UTF-8; NaN and infinities are a
    :class:`ValueError`, and so is a lone surrogate."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_json(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises :class:`ValueError` (never :class:`RecursionError`) for a document nested
    deeper than ``max_depth``, as for any other malformed one."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nested more than {max_depth} levels deep") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"nested more than {max_depth} levels deep")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return value


__all__ = ["MAX_JSON_DEPTH", "canonical_json", "parse_json", "sha256_hex"]
