"""The tuner's model evaluator reads latencies from the ISA table, as the cost model does (issue 14).

It used to classify instructions itself (barriers and memory space), so LDC and MUFU waited 25 cycles
("special") where the table says 20 ("constant") and 18 ("mufu"), and TMA loads waited as shared memory;
the same cubin then had two CPU estimates. Now both come from ``kbuild.sass.isa``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kbuild.sass import Schedule
from kbuild.sass.isa import arch_spec
from kbuild.tune.evaluate import Budget, ModelEvaluator
from kbuild.tune.measure.model import CostModel, latency_class, sass_decoder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sass"
CUBINS = sorted(p.name for p in FIXTURES.glob("*.cubin"))


@pytest.mark.parametrize("name", CUBINS)
def test_the_evaluator_and_the_cost_model_give_one_estimate(name: str) -> None:
    """The baseline, and a schedule after seeded legal moves written out as a cubin, cost the same cycles
    in the tuner's evaluator (schedule state) and in the cost model (decoding the cubin)."""
    data = (FIXTURES / name).read_bytes()
    s = Schedule.from_cubin(data)
    evaluator = ModelEvaluator(s, Budget(100, 600))
    model = CostModel(sass_decoder(), warps=evaluator.warps, latencies=s.analysis.spec.latencies)
    assert evaluator.baseline_cycles == model.cycles(data)
    rng = np.random.default_rng(14)
    for _ in range(20):
        legal = np.flatnonzero(s.legal_moves().reshape(-1))
        if not len(legal):
            break
        s.apply_action(int(rng.choice(legal)))
    moved = s.to_cubin(verify=False, disassemble_check=False)
    cycles = evaluator._cycles(np.asarray(s.order), np.asarray(s.stall))
    assert cycles == model.cycles(moved)
    assert evaluator.evaluate(s).ratio == cycles / evaluator.baseline_cycles


def test_ldc_and_mufu_wait_for_the_tables_latencies() -> None:
    """The disagreement that was: a scoreboarded LDC and MUFU are 'constant' and 'mufu', not 'special'."""
    s = Schedule.from_cubin((FIXTURES / "softmax.sm90.cubin").read_bytes())
    evaluator = ModelEvaluator(s, Budget(1, 60))
    ops = [ins.opcode.split(".")[0] for ins in s.analysis.instructions]
    spec = arch_spec(90)
    for base, cls in (("LDC", "constant"), ("MUFU", "mufu")):
        at = [i for i, op in enumerate(ops) if op == base]
        assert at, f"the fixture has no {base}"
        assert {evaluator._classes[i] for i in at} == {cls}
        assert spec.latencies[cls] != spec.latencies["special"]
    assert evaluator._classes == [latency_class(ins.opcode, spec) for ins in s.analysis.instructions]
