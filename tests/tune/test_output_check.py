"""Issue 35 part 2: constexprs shown safe by checking outputs (:mod:`kbuild.tune.level1.output_check`).

Three small kernels are recorded on this CPU as a package would call them (``kbuild record --mode cpu``), and each
block-size candidate (half and twice the recorded value) is checked for real under Triton's interpreter, on the
recorded calls, with the recorded grid: a one-pass masked row kernel may grow its block, never shrink it (half a
row left unwritten); a kernel that loops over its row in blocks takes either; an unmasked tiled copy takes
neither (a smaller tile leaves elements unwritten; a larger one writes past the output: the guard band).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from block_kernels import BLOCK_KERNELS

WORKLOAD = '''
import sys
sys.path.insert(0, {root!r})
import torch
from kbx_oc import kernels
for rows, cols in ((8, 100), (4, 120)):
    x = torch.randn(rows, cols)
    kernels.row_copy[(rows,)](torch.empty_like(x), x, cols, BLOCK_SIZE=128)
    kernels.row_sum[(rows,)](torch.empty(rows), x, cols, BLOCK_SIZE=32)
x = torch.randn(256)
kernels.tile_copy[(256 // 64,)](torch.empty_like(x), x, TILE=64)
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from kbuild.record.format import load

    tmp = tmp_path_factory.mktemp("output-check")
    (tmp / "kbx_oc").mkdir()
    (tmp / "kbx_oc" / "__init__.py").write_text("")
    (tmp / "kbx_oc" / "kernels.py").write_text(BLOCK_KERNELS)
    (tmp / "workload.py").write_text(WORKLOAD.format(root=str(tmp)))
    rec = tmp / "oc.recording.json"
    done = subprocess.run([sys.executable, "-m", "kbuild", "record", "--mode", "cpu", "--target", "sm_90", "--out",
                           str(rec), "--", sys.executable, str(tmp / "workload.py")],
                          capture_output=True, text=True, timeout=600, cwd=tmp, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    sys.path.insert(0, str(tmp))
    return rec, load(str(rec))


def _check(recorded: tuple[Path, Any], name: str) -> tuple[Any, list[tuple[bool, str]], Any]:
    from kbuild.tune.level1.derive import constexpr_candidates
    from kbuild.tune.level1.output_check import RecordedOutputCheck
    from kbuild.tune.level1.subject import from_recording

    path, rec = recorded
    (kernel,) = [k for k in rec.kernels.values() if k.name == name]
    (spec,) = kernel.specializations.values()
    subject = from_recording(rec, kernel, spec)
    check = RecordedOutputCheck(path, kernel, spec, target="sm_90")
    return subject, list(check(subject, constexpr_candidates(subject))), check


def test_a_one_pass_masked_block_may_grow_not_shrink(recorded: tuple[Path, Any]) -> None:
    _, verdicts, check = _check(recorded, "row_copy")
    assert [v.candidate for v in check.verdicts] == [{"BLOCK_SIZE": 64}, {"BLOCK_SIZE": 256}]
    (small_ok, small_why), (big_ok, big_why) = verdicts
    assert not small_ok and "unwritten" in small_why and "output 'out_ptr'" in small_why
    assert big_ok and "guard bands intact" in big_why
    # both recorded calls (8x100 and 4x120) were checked, under the interpreter
    assert "2 recorded call(s)" in big_why and "Triton's interpreter" in big_why


def test_a_loop_over_blocks_takes_either_and_joins_the_derived_space(recorded: tuple[Path, Any]) -> None:
    from kbuild.tune.level1.derive import derive_space

    subject, verdicts, check = _check(recorded, "row_sum")
    assert [ok for ok, _ in verdicts] == [True, True]
    d = derive_space(subject, check_outputs=check, max_points=1000)
    (cx,) = [x for x in d.dimensions if x.name == "constexprs"]
    assert [c["BLOCK_SIZE"] for c in cx.values] == [32, 16, 64] and d.shown_safe == ("BLOCK_SIZE",)
    assert d.default.constexprs == {"BLOCK_SIZE": 32} and not d.unverified
    assert [c["accepted"] for c in d.as_dict()["output_checks"]] == [True, True]


def test_an_unmasked_tile_takes_neither_the_guard_band_catches_the_larger(recorded: tuple[Path, Any]) -> None:
    from kbuild.tune.level1.derive import derive_space

    subject, verdicts, check = _check(recorded, "tile_copy")
    (small_ok, small_why), (big_ok, big_why) = verdicts
    assert not small_ok and "unwritten" in small_why
    assert not big_ok and "guard band" in big_why
    d = derive_space(subject, check_outputs=check, max_points=1000)
    assert not d.shown_safe and [dict(c) for c in d.unverified] == [{"TILE": 32}, {"TILE": 128}]
    assert all(c.constexprs == {} for c in d.space.configs)


def test_where_the_check_runs() -> None:
    from kbuild.tune.level1.output_check import INTERPRETER_MAX_BYTES, chosen_samples, where_to_check

    mode, _ = where_to_check(90, 1024)
    assert mode == "cpu"  # no GPU on this machine: Triton's interpreter
    mode, why = where_to_check(90, INTERPRETER_MAX_BYTES + 1)
    assert mode is None and "no sm_90 GPU here" in why
    samples = [{"args": {"x": {"dtype": "torch.float32", "shape": [n], "strides": [1]}}, "grid": [1]}
               for n in (5, 1, 9, 1, 3, 7, 2)]
    assert chosen_samples(samples, 3) == [1, 4, 2]  # the smallest, one between, the largest; duplicates once
    assert chosen_samples(samples[:2]) == [1, 0]


@pytest.mark.parametrize(("name", "want"), [("row_copy", [False, True]), ("row_sum", [True, True]),
                                            ("tile_copy", [False, False])])
@pytest.mark.gpu
def test_on_the_gpu_the_check_runs_there_and_agrees(recorded: tuple[Path, Any], name: str, want: list[bool]) -> None:
    """On a GPU of the target the check runs in this process at the recorded sizes (the build's tune phase on a GPU
    machine), with the interpreter's verdicts."""
    from gpu_marks import has_sm90

    if not has_sm90():
        pytest.skip("needs an sm_90 GPU")
    _, verdicts, check = _check(recorded, name)
    assert [ok for ok, _ in verdicts] == want
    assert all(v.where.startswith("cuda") for v in check.verdicts), [v.why for v in check.verdicts]
