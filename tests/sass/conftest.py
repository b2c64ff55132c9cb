from __future__ import annotations

import functools
from pathlib import Path

import pytest


@functools.cache
def _schedule(path: str):
    from kbuild.sass import Schedule

    return Schedule.from_cubin(path)


@pytest.fixture
def fixture_schedule():
    """``fixture_schedule(path)`` → a reset Schedule for that fixture (analysed once per session)."""

    def get(path: Path):
        s = _schedule(str(path))
        s.reset()
        return s

    return get
