"""The one canonical JSON encoding: the bytes that content keys, metadata digests and signatures are computed over.

Used by :func:`kbuild.key.digest` (the content key) and by the store's records
(:mod:`kbuild.cache.record`). It imports nothing of kbuild, so both stand on it without the key loading
the store or the store knowing about keys. Changing its bytes changes keys and invalidates signatures;
``tests/test_canonical_json.py`` and ``tests/test_key.py`` pin them.
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json(value: Any, *, ascii_only: bool = False) -> bytes:
    """The canonical bytes of JSON data: keys sorted, no whitespace, UTF-8. NaN and infinities have no
    canonical form (:class:`ValueError`), and neither has a lone surrogate in UTF-8.

    ``ascii_only`` writes every non-ASCII character as a ``\\uXXXX`` escape instead of in UTF-8: the
    spelling of the content key (``KEY_SCHEMA`` 1), while store records (format ``kbuild-artefact/1``) are
    UTF-8. The two spellings are the same bytes for ASCII data without DEL (U+007F, which only the ASCII
    spelling escapes). Both were in use before they became one
    function and each stays as it was, so that no key and no signature changes; changing either would take
    a new ``KEY_SCHEMA`` or record format.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, allow_nan=False)
    return text.encode("ascii" if ascii_only else "utf-8")


__all__ = ["canonical_json"]
