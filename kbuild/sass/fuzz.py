"""Random legal move sequences, each rewritten to a cubin and checked.

What every sequence checks (``kbuild sass fuzz``):

1. It resets the schedule, draws a depth ``d`` in ``1..max_depth`` and applies ``d`` moves drawn
   uniformly from the legal ones (rejection sampling with :meth:`Schedule.is_legal`, which agrees with
   the mask; ``tests/sass`` checks that agreement).
2. :meth:`Schedule.to_cubin` writes the cubin; the independent :class:`~kbuild.sass.verify.Verifier`
   must accept it (order of every conflicting pair, distances, control codes, nv.info offsets,
   untouched bytes). A rejection counts in ``verifier_rejections``.
3. Every word whose 16 bytes differ from the original word at that slot is decoded by nvdisasm (all
   sequences' distinct changed words, and the original words, in one ``nvdisasm --binary`` call) and
   must give the same text as the original instruction the schedule put there, modulo ``.reuse``.
   Control-flow words (which never move, but may get a raised stall) must keep their body bits
   instead, since their text holds absolute addresses. A difference counts in ``mismatches``. Words
   that did not change decode identically by construction (same bytes at the same address).
4. For the first ``full_checks`` sequences the whole rewritten cubin is also decoded by
   ``nvdisasm -json`` in ELF mode and compared slot by slot.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import control
from .disasm import disassemble_raw
from .schedule import Schedule
from .verify import Verifier

_REUSE = re.compile(r"\.reuse\b")


def random_walk(sched: Schedule, depth: int, rng: np.random.Generator, *, max_tries: int = 2000) -> int:
    """Apply up to ``depth`` uniformly drawn legal moves; returns how many were applied."""
    done = 0
    n = sched.n
    for _ in range(depth):
        for _try in range(max_tries):
            a = int(rng.integers(0, 2 * n))
            if sched.is_legal(a // 2, a % 2):
                sched.apply_action(a)
                done += 1
                break
        else:
            mask = np.flatnonzero(sched.action_mask())
            if not len(mask):
                return done
            sched.apply_action(int(rng.choice(mask)))
            done += 1
    return done


def fuzz(sched: Schedule, *, sequences: int, max_depth: int, seed: int, full_checks: int = 2,
         progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    an = sched.analysis
    if sched.cubin is None:
        raise ValueError("fuzzing needs a schedule built from a cubin")
    verifier = Verifier(an, sched.cubin)
    rng = np.random.default_rng(seed)
    orig = an.words
    olo, ohi = control.split_words(control.words_to_bytes(orig))
    sm = sched.cubin.sm
    verified_by_verifier = 0
    rejections: list[dict[str, Any]] = []
    # changed word → set of (sequence, expected instruction)
    pending: dict[int, list[tuple[int, int]]] = {}
    moves_total = 0
    t0 = time.perf_counter()
    for q in range(sequences):
        sched.reset()
        depth = int(rng.integers(1, max_depth + 1))
        moves_total += random_walk(sched, depth, rng)
        data = sched.to_cubin(verify=False)
        problems = verifier.check(data, expected_order=sched.order, disassemble_check=q < full_checks)
        if problems:
            rejections.append({"sequence": q, "depth": depth, "problems": problems[:5]})
        else:
            verified_by_verifier += 1
        lo, hi = sched.word_arrays()
        for t in np.flatnonzero((lo != olo) | (hi != ohi)).tolist():
            w = int(lo[t]) | int(hi[t]) << 64
            pending.setdefault(w, []).append((q, int(sched.order[t])))
        if progress:
            progress(1)
    # decode all distinct changed words, plus the originals, in one nvdisasm call
    changed = list(pending)
    originals = sorted({x for lst in pending.values() for _, x in lst})
    blobs = [w.to_bytes(16, "little") for w in changed] + [orig[x].to_bytes(16, "little") for x in originals]
    decoded = disassemble_raw(blobs, sm) if blobs else []
    orig_text = {x: decoded[len(changed) + k][0] for k, x in enumerate(originals)}
    bad_sequences: dict[int, str] = {}
    for k, w in enumerate(changed):
        got = decoded[k][0]
        for q, x in pending[w]:
            want = orig_text[x]
            if an.instructions[x].control_flow or want.control_flow:
                ok = control.body(w) == control.body(orig[x])
            else:
                ok = _REUSE.sub("", got.text) == _REUSE.sub("", want.text)
            if not ok and q not in bad_sequences:
                bad_sequences[q] = f"word for 0x{16 * x:x} decodes to {got.text!r}, expected {want.text!r}"
    rejected = {r["sequence"] for r in rejections}
    verified = sum(1 for q in range(sequences) if q not in rejected and q not in bad_sequences)
    return {
        "kernel": an.kernel,
        "sm": sm,
        "instructions": an.n,
        "sequences": sequences,
        "verified": verified,
        "mismatches": len(bad_sequences),
        "verifier_rejections": len(rejections),
        "pinned_fraction": round(an.pinned_fraction(), 4),
        "max_depth": max_depth,
        "seed": seed,
        "moves": moves_total,
        "distinct_changed_words": len(changed),
        "full_elf_checks": min(full_checks, sequences),
        "seconds": round(time.perf_counter() - t0, 2),
        "examples": {"rejections": rejections[:3],
                     "mismatches": [{"sequence": q, "problem": p} for q, p in list(bad_sequences.items())[:3]]},
    }
