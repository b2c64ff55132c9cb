"""No behaviour change: the engine's decisions on every fixture equal the committed record.

The record (``tests/fixtures/sass/engine_digests.json``) was written by ``tests/sass/engine_digest.py``
before the SASS knowledge moved into the ISA tables (issue 14). It covers the dependency analysis, the
legal-move masks along a seeded walk with every illegal move's reason, the cost model's classes and
cycles, the gym environment's features and ``kbuild sass stats``. A refactor that changes any decision
on any fixture fails here; a deliberate change of a rule regenerates the record in the same commit.
"""

from __future__ import annotations

import json

import pytest
from engine_digest import RECORD, digest
from sass_synth import CUBINS

RECORDED = json.loads(RECORD.read_text())["fixtures"]


def test_record_covers_every_fixture():
    assert sorted(RECORDED) == sorted(p.stem for p in CUBINS)


@pytest.mark.parametrize("path", CUBINS, ids=[p.stem for p in CUBINS])
def test_engine_decisions_unchanged(path):
    assert digest(path) == RECORDED[path.stem]
