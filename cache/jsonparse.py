"""The bounded JSON parser for what the store reads: records, listings, bundle manifests, statistics.

The bytes kbuild *writes* for digests and signatures are :func:`kbuild.canonical.canonical_json`.
"""

from __future__ import annotations

import json
from typing import Any

#: Deepest nesting of arrays and objects accepted in any JSON kbuild reads (records, metadata,
#: manifests). The pipeline's metadata nests a few levels; Python's parser and encoder recurse once
#: per level, so without a bound a hostile document ends in a RecursionError instead of a message.
MAX_JSON_DEPTH = 64


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


__all__ = ["MAX_JSON_DEPTH", "parse_json"]
