"""Helpers for the reliability cases of issue 13 (``@pytest.mark.hostile``).

Each hostile test is marked ``@pytest.mark.hostile(fault="...", outcome="...")``:

* ``fault`` names the class of bad input or misbehaviour (e.g. ``"slow remote"``);
* ``outcome`` is what kbuild promises for it, one of :data:`OUTCOMES`.

``benchmarks/reliability.py`` runs every marked case and tallies them per class into
``benchmarks/results/reliability.json``: the counts come from the run, never from this file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

OUTCOMES = ("clean error", "degraded with warning", "served correct bytes")


def tree_digest(*roots: Path) -> dict[str, str]:
    """Path → sha256 of every file under ``roots`` (missing roots are empty): compare before/after
    to prove that nothing was written."""
    out: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def assert_clean_error(code: int, err: str, *, names: Iterable[str] = (), exit_code: int = 2) -> None:
    """The CLI's promise for bad input: the exit status, no traceback, and an ``error:`` message that
    names each of ``names`` (the file and the key)."""
    assert code == exit_code, f"exit {code}, expected {exit_code}; stderr:\n{err}"
    assert "Traceback" not in err, err
    assert "error: " in err, err
    for name in names:
        assert name in err, f"{name!r} not named in:\n{err}"
