"""A digest of everything the SASS engine decides about one fixture cubin, for no-behaviour-change checks.

    python tests/sass/engine_digest.py --write     # record tests/fixtures/sass/engine_digests.json

``test_sass_engine_digest.py`` recomputes the digests and compares them with the committed record, so a
refactor of the ISA tables, the dependency model, the move code, the cost model or the environment's
features that changes any decision fails the suite. Each part is a sha256 of a canonical JSON document:

* ``analysis``: per instruction, every field of its semantics (reads, writes, memory, pin reason, cap,
  control code, variable latency), the basic blocks, the DEPBAR mask, the loops, every distance
  constraint and every remapped nv.info offset;
* ``legal_moves``: the legal-move mask and every illegal move's reason at the start, then the mask after
  each of 150 seeded random legal moves (and the stall repairs each move made);
* ``cost_model``: the cost model's latency class of every instruction, its cycle estimate of the cubin
  through the sass decoder, and the tuner's model evaluator on the walk's schedules;
* ``env``: the gym environment's hot region, movable set and static features;
* ``stats``: ``kbuild sass stats`` minus the timing-free legal move count (already covered).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sass"
RECORD = FIXTURES / "engine_digests.json"
WALK = 150


def _sha(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _analysis_doc(an: Any) -> dict[str, Any]:
    sems = [[s.reads, s.writes, s.space, s.mem_read, s.mem_write, s.pinned, s.cap, s.stall, s.wait, s.sets,
             s.variable, s.wbar, s.rbar] for s in an.sems]
    return {
        "sems": sems, "block_of": an.block_of.tolist(), "block_start": an.block_start.tolist(),
        "block_end": an.block_end.tolist(), "depbar_mask": an.depbar_mask, "loops": an.loops(),
        "cons": [an.cons_p.tolist(), an.cons_c.tolist(), an.cons_req.tolist()],
        "offset_records": an.offset_records,
    }


def digest(path: Path) -> dict[str, str]:
    from kbuild.sass import DOWN, UP, Schedule
    from kbuild.sass.cli import stats_of
    from kbuild.tune.env import SassScheduleEnv
    from kbuild.tune.evaluate import Budget, ModelEvaluator
    from kbuild.tune.measure.model import CostModel, latency_class, sass_decoder

    data = path.read_bytes()
    s = Schedule.from_cubin(data)
    an = s.analysis
    out = {"analysis": _sha(_analysis_doc(an))}

    # legal moves: the mask, each illegal move's reason, then the mask along a seeded walk
    first = s.legal_moves()
    reasons = [[s.why_illegal(t, d) for d in (UP, DOWN)] for t in range(s.n)]
    rng = np.random.default_rng(20261203)
    masks = [first.tolist()]
    repairs = []
    model = ModelEvaluator(s, Budget(10 * WALK, 3600))
    model_cycles = [model.baseline_cycles]
    for _ in range(WALK):
        legal = np.flatnonzero(s.legal_moves().reshape(-1))
        if not len(legal):
            break
        mv = s.apply_action(int(rng.choice(legal)))
        repairs.append([mv.slot, mv.direction, mv.repairs, mv.cleared])
        masks.append(s.legal_moves().tolist())
        model_cycles.append(model._cycles(np.asarray(s.order), np.asarray(s.stall)))
    out["legal_moves"] = _sha({"masks": masks, "reasons": reasons, "repairs": repairs})
    s.reset()

    # cost model
    classes = [latency_class(x.opcode, an.spec) for x in an.instructions]
    cycles = CostModel(sass_decoder(), warps=4).cycles(data)
    out["cost_model"] = _sha({"classes": classes, "cycles": cycles, "evaluator": model_cycles})

    # environment features
    env = SassScheduleEnv(s, ModelEvaluator(s, Budget(10, 600)))
    out["env"] = _sha({"region": list(env.region), "movable": env.movable.tolist(),
                       "features": env._static.round(6).tolist()})
    st = stats_of(s)
    out["stats"] = _sha({k: v for k, v in st.items() if k != "legal_moves"})
    return out


def all_digests() -> dict[str, dict[str, str]]:
    return {p.stem: digest(p) for p in sorted(FIXTURES.glob("*.cubin"))}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print(__doc__)
        raise SystemExit(2)
    doc = {"walk": WALK, "fixtures": all_digests()}
    RECORD.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"wrote {RECORD}")
