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

With ``kinds`` (issue 15) each step draws one kind uniformly from ``moves`` (one-slot), ``far``,
``yield``, ``reuse`` and ``stall`` and applies a random legal edit of it (:func:`random_edits`); the
result counts the edits per kind. Step 3 then also checks that nvdisasm prints ``.reuse`` on exactly
the operands the engine's reuse map says each set bit annotates.
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


KINDS = ("moves", "far", "yield", "reuse", "stall")


def _one_move(sched: Schedule, rng: np.random.Generator) -> bool:
    a = int(rng.integers(0, 2 * sched.n))
    if sched.is_legal(a // 2, a % 2):
        sched.apply_action(a)
        return True
    return False


def _one_edit(sched: Schedule, kind: str, rng: np.random.Generator) -> bool:
    """Try one random edit of ``kind``; True when one was applied."""
    n = sched.n
    if kind == "moves":
        return _one_move(sched, rng)
    x = int(rng.integers(0, n))
    if kind == "far":
        d = int(rng.integers(0, 2))
        k = sched.reach(x, d, limit=16)
        if k < 1:
            return False
        sched.apply_far(x, d, int(rng.integers(1, k + 1)))
        return True
    rec: tuple[str, int, int]
    if kind == "yield":
        rec = ("yield", x, int(not sched.yield_[x]))
    elif kind == "reuse":
        cur = int(sched.reuse()[x])
        add = sched.reuse_settable(x) & ~cur
        if cur and (not add or rng.random() < 0.5):
            bits = [k for k in range(4) if cur >> k & 1]
            rec = ("reuse", x, cur & ~(1 << int(rng.choice(bits))))
        elif add:
            bits = [k for k in range(4) if add >> k & 1]
            rec = ("reuse", x, cur | 1 << int(rng.choice(bits)))
        else:
            return False
    else:
        cur = int(sched.stall[x])
        if rng.random() < 0.5:
            floor = sched.stall_floor(x)
            if floor >= cur:
                return False
            rec = ("stall", x, int(rng.integers(floor, cur)))
        else:
            top = int(sched._max_stall[x])
            if top <= cur:
                return False
            rec = ("stall", x, int(rng.integers(cur + 1, top + 1)))
    if sched.why_edit_illegal(rec) is not None:
        return False
    sched.apply_edit(rec)
    return True


def random_edits(sched: Schedule, depth: int, rng: np.random.Generator, kinds: tuple[str, ...] = KINDS, *,
                 max_tries: int = 400) -> dict[str, int]:
    """Apply up to ``depth`` random legal edits, each of a kind drawn uniformly from ``kinds``; returns the
    number applied per kind."""
    counts = dict.fromkeys(kinds, 0)
    for _ in range(depth):
        kind = str(rng.choice(list(kinds)))
        for _try in range(max_tries):
            if _one_edit(sched, kind, rng):
                counts[kind] += 1
                break
    return counts


def _reuse_problem(an: Any, x: int, word: int, got: Any) -> str | None:
    """The operands nvdisasm marks ``.reuse`` must be those the reuse map says the set bits annotate."""
    flags = control.decode(word).reuse
    if not flags:
        return None
    rmap = an.reuse_map[x]
    if not all(flags >> k & 1 == 0 or k in rmap for k in range(4)):
        return None if flags == control.decode(an.words[x]).reuse else f"reuse bits {flags:#x} outside the map"
    want = sorted(rmap[k] for k in range(4) if flags >> k & 1)
    marked = sorted(j for j, o in enumerate(got.operands) if o.endswith(".reuse"))
    return None if want == marked else f"reuse flags {flags:#x} mark operands {marked}, expected {want}"


def fuzz(sched: Schedule, *, sequences: int, max_depth: int, seed: int, full_checks: int = 2,
         progress: Callable[[int], None] | None = None, kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
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
    kind_counts = dict.fromkeys(kinds or (), 0)
    t0 = time.perf_counter()
    for q in range(sequences):
        sched.reset()
        depth = int(rng.integers(1, max_depth + 1))
        if kinds is None:
            moves_total += random_walk(sched, depth, rng)
        else:
            for kind, v in random_edits(sched, depth, rng, kinds).items():
                kind_counts[kind] += v
                moves_total += v
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
            why = None if ok else f"word for 0x{16 * x:x} decodes to {got.text!r}, expected {want.text!r}"
            if ok and kinds is not None and "reuse" in kinds:
                why = _reuse_problem(an, x, w, got)
            if why and q not in bad_sequences:
                bad_sequences[q] = why
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
        **({"kinds": kind_counts} if kinds is not None else {}),
        "distinct_changed_words": len(changed),
        "full_elf_checks": min(full_checks, sequences),
        "seconds": round(time.perf_counter() - t0, 2),
        "examples": {"rejections": rejections[:3],
                     "mismatches": [{"sequence": q, "problem": p} for q, p in list(bad_sequences.items())[:3]]},
    }
