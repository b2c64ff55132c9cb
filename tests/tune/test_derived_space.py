"""A derived level-1 space for kernels that declare none, pruned on the CPU (issue 35, part 2).

Real parts only: the Liger-Kernel recording made on an H100 from Liger's own test files
(``benchmarks/results/h100/issue36-s2/record/liger.recording.json``), Liger's kernels as installed, real Triton
compiles, and ptxas itself: every prune for spills, shared memory or duplicate machine code is checked against a
report kbuild did not produce (ptxas run again here on the point's PTX, Triton's own metadata, the cubins' text).
The specialisation of each recorded kernel is the one the recorded workload called most on sm_90
(:func:`kbuild.tune.level1.subject.pick_specialization`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import assert_clean_error

pytest.importorskip("optuna")  # the tune extra
pytest.importorskip("liger_kernel")

from kbuild.arch import AMPERE, HOPPER, TABLE, architecture
from kbuild.bench.spec import Config
from kbuild.cli import main
from kbuild.compile.ptxas_report import PtxasReport, PtxasReportError, parse
from kbuild.record.format import load
from kbuild.targets import parse_target
from kbuild.tune.level1.derive import DerivedSpace, derive_space, kernel_shape, register_caps
from kbuild.tune.level1.occupancy import occupancy
from kbuild.tune.level1.prune import REASONS, Pruned, compile_point, prune
from kbuild.tune.level1.space import Space
from kbuild.tune.level1.subject import Subject, find_kernels, from_bench, from_recording, pick_specialization

ROOT = Path(__file__).resolve().parents[2]
LIGER = ROOT / "benchmarks" / "results" / "h100" / "issue36-s2" / "record" / "liger.recording.json"
SM90 = parse_target("sm_90")


@functools.cache
def _recording() -> Any:
    return load(str(LIGER))


def liger(name: str) -> Subject:
    """The subject of a recorded Liger kernel: its most-called specialisation on sm_90."""
    rec = _recording()
    (kernel,) = find_kernels(rec, [name], where=str(LIGER))
    spec = pick_specialization(kernel, SM90)
    assert spec is not None
    return from_recording(rec, kernel, spec)


def narrowed(derived: DerivedSpace, configs: Sequence[Config]) -> DerivedSpace:
    """``derived`` with only ``configs`` (the default first), to compile a handful of points."""
    return dataclasses.replace(derived, space=Space.of(configs))


# ----------------------------------------------------------------------------------------------
# ptxas, run again here


def ptxas_again(ptx: str, target: str, ptx_options: str | None, tmp: Path) -> tuple[PtxasReport, bytes]:
    """ptxas's ``-v`` report and the kernel's ``.text`` bytes for ``ptx``, from ptxas run here as Triton runs it
    (``make_cubin``: line info requested and suppressed, ``-v``, the point's ptxas flags)."""
    from triton import knobs

    from kbuild.sass.elf import Cubin

    src, out = tmp / "k.ptx", tmp / "k.cubin"
    src.write_text(ptx)
    cmd = [knobs.nvidia.ptxas.path, "-lineinfo", "-suppress-debug-info", "-v", *(ptx_options or "").split(),
           f"--gpu-name={target}", str(src), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    report = parse(done.stderr)
    cubin = Cubin(out.read_bytes())
    return report, cubin.section_bytes(cubin.text(report.function))


def check_against_ptxas(pruned: Pruned, tmp: Path, *, limit: int | None = None) -> dict[str, int]:
    """Every kept point and every point pruned for spills or as a duplicate, against ptxas run again: a spills
    prune shows spill stores or loads beyond the default's, a kept point none beyond the default's, a duplicate the
    same ``.text`` as the point it duplicates. ``limit``: points checked per kind. Returns the counts checked."""
    target = pruned.derived.subject.target.arch
    by_label = {v.compiled.label: v for v in pruned.verdicts}
    base, _ = ptxas_again(pruned.verdicts[0].compiled.ptx or "", target, pruned.verdicts[0].config.ptx_options, tmp)
    checked = {"kept": 0, "spills": 0, "duplicate": 0}
    for v in pruned.verdicts:
        kind = "kept" if v.kept else v.reason
        if kind not in checked or (limit is not None and checked[kind] >= limit):
            continue
        assert v.compiled.ptx, v.compiled.label
        report, text = ptxas_again(v.compiled.ptx, target, v.config.ptx_options, tmp)
        assert report.registers == v.compiled.ptxas.registers, v.compiled.label  # type: ignore[union-attr]
        if kind == "spills":
            assert report.spill_stores > base.spill_stores or report.spill_loads > base.spill_loads, v.compiled.label
        elif kind == "kept":
            assert report.spill_stores <= base.spill_stores and report.spill_loads <= base.spill_loads, \
                v.compiled.label
        else:
            twin = by_label[v.same_as or ""]
            _, twin_text = ptxas_again(twin.compiled.ptx or "", target, twin.config.ptx_options, tmp)
            assert text == twin_text, (v.compiled.label, twin.compiled.label)
        checked[kind] += 1
    return checked


# ----------------------------------------------------------------------------------------------
# The facts


def test_occupancy_counts_registers_warps_and_shared_memory() -> None:
    h100 = architecture(90)
    # 64 registers x 32 threads = 2,048 per warp: 32 warps' worth of the 65,536 → 8 blocks of 4 warps
    o = occupancy(h100, registers=64, num_warps=4, shared=0)
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (8, 32, "registers")  # type: ignore[union-attr]
    # 60 registers round up to 64 (units of 256 per warp): the same
    assert occupancy(h100, registers=60, num_warps=4, shared=0) == o
    # 100 KB of shared memory (+1 KB reserved per block): 2 blocks of 228 KB
    o = occupancy(h100, registers=32, num_warps=4, shared=100 * 1024)
    assert (o.blocks_per_sm, o.limiter) == (2, "shared memory")  # type: ignore[union-attr]
    # 32 blocks at most, 64 warps at most
    assert occupancy(h100, registers=16, num_warps=1, shared=0).warps_per_sm == 32  # type: ignore[union-attr]
    assert occupancy(h100, registers=16, num_warps=8, shared=0).warps_per_sm == 64  # type: ignore[union-attr]
    # registers come from one of 4 sub-partitions (16,384 each): 200 registers = 6,400 per warp, 2 warps per
    # sub-partition, 8 per SM (not 65,536 / 6,400 = 10)
    o = occupancy(h100, registers=200, num_warps=1, shared=0)
    assert (o.blocks_per_sm, o.limiter) == (8, "registers")  # type: ignore[union-attr]
    # shared memory in units of 128 bytes: 45,658 bytes take 45,696 (+1,024 reserved): 4 blocks in 228 KB, not 5
    assert occupancy(h100, registers=32, num_warps=4, shared=45_658).blocks_per_sm == 4  # type: ignore[union-attr]
    assert occupancy(h100, registers=32, num_warps=4, shared=45_568).blocks_per_sm == 5  # type: ignore[union-attr]
    # 255 registers x 1,024 threads does not fit: no block
    assert occupancy(h100, registers=255, num_warps=32, shared=0).blocks_per_sm == 0  # type: ignore[union-attr]
    # sm_86 holds 48 warps; an architecture without limits is not modelled
    assert occupancy(architecture(86), registers=16, num_warps=8, shared=0).warps_per_sm == 48  # type: ignore[union-attr]
    assert occupancy(architecture(75), registers=16, num_warps=8, shared=0) is None


def test_the_limits_agree_with_the_cost_models_parts() -> None:
    for row in TABLE.values():
        if row.part is not None:
            assert row.limits is not None
            assert (row.limits.shared_per_sm, row.limits.shared_per_block) == (row.part.shared_per_sm,
                                                                                row.part.shared_per_block)
    assert (HOPPER.shared_per_block, AMPERE.shared_per_block) == (227 * 1024, 163 * 1024)


def test_the_ptxas_report_kbuild_keeps_is_ptxas_own(tmp_path: Path) -> None:
    subject = liger("element_mul_kernel")
    point = Config({}, num_warps=1, num_stages=3)  # 32,768 elements on one warp: ptxas spills
    c = compile_point(subject, point, keep_code=True)
    assert c.error is None and c.ptxas is not None and c.ptx
    again, _ = ptxas_again(c.ptx, "sm_90a", None, tmp_path)
    assert c.ptxas == again and c.ptxas.spills and c.ptxas.spill_stores > 0 and c.ptxas.stack > 0
    assert "spill stores" in c.ptxas_log
    with pytest.raises(PtxasReportError):
        parse("ptxas info    : 0 bytes gmem\n")


# ----------------------------------------------------------------------------------------------
# Deriving


def test_a_loop_free_kernel_varies_warps_registers_and_ptxas_flags_only() -> None:
    subject = liger("_rms_norm_forward_kernel")
    d = derive_space(subject)
    dims = {x.name: x.values for x in d.dimensions}
    assert d.shape.loops == 0 and not d.shape.dot_in_loop
    assert dims["num_warps"][0] == subject.default.num_warps and sorted(dims["num_warps"]) == [1, 2, 4, 8, 16, 32]
    assert dims["num_stages"] == (subject.default.num_stages,)  # no loop: pipelining changes nothing
    # each point's occupancy steps on sm_90: 65,536 / (32 x warps x blocks) in 8s, 64 to 254 (4 warps: 168, 128)
    assert dims["maxnreg"] == (None, 168, 128, 80, 64) and register_caps(65536, 4) == (168, 128)
    assert {w: register_caps(65536, w) for w in (1, 2, 8, 16, 32)} == {1: (), 2: (), 8: (128, 80, 64),
                                                                       16: (128, 64), 32: (64,)}
    assert all(c.maxnreg in (None, *register_caps(65536, c.num_warps)) for c in d.space.configs)
    assert dims["num_ctas"] == (1,) and dims["ptx_options"] == (None, "--register-usage-level=10")
    assert "constexprs" not in dims and len(d) == 2 * (1 + 1 + 3 + 4 + 3 + 2) and not d.thinned
    # not a full grid any more (a point's caps depend on its warps): the sampler searches the list by its index
    assert d.default == subject.default and not d.space.grid and d.space.dimensions == {"index": tuple(range(len(d)))}
    block = subject.constexprs["BLOCK_SIZE"]  # Liger's calculate_settings: not declared tunable, only proposed
    assert list(d.unverified) == [{"BLOCK_SIZE": block // 2}, {"BLOCK_SIZE": block * 2}]


def test_a_kernel_imported_differently_from_the_recording_is_noted() -> None:
    subject = liger("_rms_norm_forward_kernel")
    assert not derive_space(subject).notes[1:]  # only the unverified constexprs' note
    other = dataclasses.replace(subject, origin={**subject.origin, "source_hash": "0" * 64})
    assert any("not the one recorded" in n for n in derive_space(other).notes)


def test_an_autotuned_kernel_varies_the_constexprs_its_configs_declare() -> None:
    subject = liger("_dyt_fwd_kernel")
    assert subject.tunable_from == "@triton.autotune configs"
    assert sorted(c["BLOCK_N"] for c in subject.tunable) == [1024, 2048, 4096]  # each listed once
    assert subject.tunable[0] == dict(subject.default.constexprs)  # the recorded choice first
    d = derive_space(subject)
    (cx,) = [x for x in d.dimensions if x.name == "constexprs"]
    assert sorted(c["BLOCK_N"] for c in cx.values) == [1024, 2048, 4096]
    assert {c.label() for c in d.space.configs} >= {subject.default.label()}
    assert "N" in subject.constexprs and "BLOCK_N" not in subject.constexprs  # fixed vs tunable


def test_hopper_clusters_only_for_a_dot_in_a_loop_and_only_where_there_are_clusters() -> None:
    moe = liger("_fused_down_proj_kernel")
    d = derive_space(moe, max_points=100_000)
    dims = {x.name: x.values for x in d.dimensions}
    assert d.shape.loops and d.shape.dot_in_loop
    assert set(dims["num_ctas"]) == {1, 2} and set(dims["num_stages"]) >= {1, 2, 3, 4}
    ampere = derive_space(dataclasses.replace(moe, target=parse_target("sm_80")), max_points=100_000)
    assert {x.name: x.values for x in ampere.dimensions}["num_ctas"] == (1,)
    assert not kernel_shape(liger("_swiglu_forward_kernel").source.load()).loops


def test_a_large_space_is_thinned_in_the_stated_order() -> None:
    d = derive_space(liger("_rms_norm_forward_kernel"), max_points=10)
    assert len(d) <= 10 and [s.split(":")[0] for s in d.thinned] == ["ptx_options", "num_warps"]
    d = derive_space(liger("_rms_norm_forward_kernel"), max_points=4)
    assert len(d) <= 4 and [s.split(":")[0] for s in d.thinned] == ["ptx_options", "num_warps", "maxnreg", "maxnreg"]
    moe = derive_space(liger("_fused_down_proj_kernel"))
    assert len(moe) <= 128 and moe.thinned and moe.default == liger("_fused_down_proj_kernel").default


def test_the_derived_matmul_space_holds_the_point_the_declared_space_won_with() -> None:
    """On an H200 the declared space's best for the suite's 512x512x2048 matmul was BLOCK_K 128 with BLOCK_M 64, 4
    warps under a 168-register cap (1.246x); the derived space reached 1.126x on an H100 without it: its autotune
    list pairs BLOCK_K 128 only with BLOCK_M 32, and its caps were thinned before its warps. The list's values are
    now crossed (the spec has a torch reference), warps and clusters are thinned first, and a point's caps are its
    occupancy steps, so 4 warps keep 168 (3 blocks an SM)."""
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import load_spec
    from kbuild.tune.level1.subject import from_bench

    spec = load_spec(SUITE["matmul_leakyrelu_512x512x2048"])
    subject = from_bench(spec, parse_target("sm_90"))
    assert len(subject.tunable) == 12 and subject.tunable[:4] == tuple(dict(c.constexprs) for c in spec.configs)
    d = derive_space(subject)
    assert len(d) <= 128 and [s.split(":")[0] for s in d.thinned] == [
        "ptx_options", "num_warps", "num_ctas", "maxnreg", "num_stages"]
    winner = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8}
    assert any(dict(c.constexprs) == winner and c.num_warps == 4 and c.num_stages == 4 and c.maxnreg == 168
               for c in d.space.configs)
    assert {c.maxnreg for c in d.space.configs if c.num_warps == 4} == {None, 168}
    assert d.default == d.space.configs[0] and d.default.label() == "BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,GROUP_M=8,w4,s4"


def test_crossing_a_lists_values_needs_an_independent_reference_and_stays_small() -> None:
    import dataclasses

    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import load_spec
    from kbuild.tune.level1.subject import MAX_CROSSED, crossed_values, from_bench

    spec = load_spec(SUITE["matmul_leakyrelu_512x512x2048"])
    listed = [dict(c.constexprs) for c in spec.configs]
    # a recorded spec's reference is one configuration's own output: only the listed combinations
    recorded = dataclasses.replace(spec, reference_is_a_configuration=True)
    assert from_bench(recorded, parse_target("sm_90")).tunable == tuple(listed)
    tunable_from = from_bench(spec, parse_target("sm_90")).tunable_from
    assert tunable_from is not None and tunable_from.startswith("bench spec configs (4), then 8 more")
    assert crossed_values([{"A": 1, "B": 1}, {"A": 2, "B": 2}]) == [{"A": 1, "B": 2}, {"A": 2, "B": 1}]
    assert crossed_values([{"A": 1}, {"B": 2}]) == []  # different constexprs: nothing to pair
    wide = [{"A": i, "B": i} for i in range(5)]  # 25 pairings > MAX_CROSSED
    assert MAX_CROSSED < 25 and crossed_values(wide) == []


def test_constexprs_shown_safe_by_an_output_check_join_the_space() -> None:
    subject = liger("_rms_norm_forward_kernel")
    block = subject.constexprs["BLOCK_SIZE"]
    asked: list[Mapping[str, Any]] = []

    def check(subject: Subject, candidates: Sequence[Mapping[str, Any]]) -> list[tuple[bool, str]]:
        asked.extend(candidates)
        return [(c["BLOCK_SIZE"] > block, "a masked block may grow, not shrink") for c in candidates]

    d = derive_space(subject, check_outputs=check, max_points=1000)
    (cx,) = [x for x in d.dimensions if x.name == "constexprs"]
    assert asked and [c["BLOCK_SIZE"] for c in cx.values] == [block, block * 2]
    assert list(d.unverified) == [{"BLOCK_SIZE": block // 2}] and len(d) == 2 * 28
    assert d.default.constexprs == {"BLOCK_SIZE": block} and "BLOCK_SIZE" not in d.subject.constexprs
    assert d.shown_safe == ("BLOCK_SIZE",) and [c["accepted"] for c in d.output_checks] == [False, True]
    assert d.as_dict()["output_checks"][1] == {"constexprs": {"BLOCK_SIZE": block * 2}, "accepted": True,
                                               "why": "a masked block may grow, not shrink"}


# ----------------------------------------------------------------------------------------------
# Pruning, checked against ptxas


def test_spills_are_pruned_as_ptxas_reports_them(tmp_path: Path) -> None:
    subject = liger("element_mul_kernel")
    d = derive_space(subject)
    w = subject.default.num_warps
    points = [subject.default, Config({}, 1, 3), Config({}, 2, 3), Config({}, 8, 3), Config({}, 16, 3),
              Config({}, 16, 3, maxnreg=64), Config({}, w, 3, ptx_options="--register-usage-level=10")]
    pruned = prune(narrowed(d, points), jobs=0, keep_code=True)
    counts = pruned.counts()
    assert counts["spills"] >= 2 and len(pruned.kept) >= 2, [(v.compiled.label, v.reason) for v in pruned.verdicts]
    checked = check_against_ptxas(pruned, tmp_path)
    assert checked["spills"] == counts["spills"] and checked["kept"] == len(pruned.kept)


def test_shared_memory_over_the_targets_limit_is_pruned_from_tritons_own_figure() -> None:
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import load_spec

    spec = load_spec(SUITE["matmul_leakyrelu_4096"], small=True)
    subject = from_bench(spec, SM90)
    d = derive_space(subject)
    big = Config({**subject.default.constexprs, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128}, 8, 4)
    pruned = prune(narrowed(d, [subject.default, big]), jobs=0)
    default, over = pruned.verdicts
    limit = SM90.architecture.limits.shared_per_block  # type: ignore[union-attr]
    assert default.kept and default.compiled.shared <= limit
    assert over.reason == "shared-memory" and over.compiled.shared > limit, over.detail


def test_register_caps_that_gain_no_occupancy_and_duplicate_code_are_pruned(tmp_path: Path) -> None:
    subject = liger("_rms_norm_forward_kernel")
    d = derive_space(subject)
    w = subject.default.num_warps
    points = [subject.default, Config({}, w, 3, maxnreg=128), Config({}, w, 3, ptx_options="--register-usage-level=10"),
              Config({}, w, 1), Config({}, 1, 3)]
    pruned = prune(narrowed(d, points), jobs=0, keep_code=True)
    by = {v.config.label(): v for v in pruned.verdicts}
    capped = by[points[1].label()]
    assert capped.reason == "occupancy" and capped.occupancy is not None
    assert capped.occupancy.warps_per_sm <= by[points[0].label()].occupancy.warps_per_sm  # type: ignore[union-attr]
    assert by[points[3].label()].reason == "duplicate" and by[points[3].label()].same_as == points[0].label()
    assert by[points[4].label()].kept
    checked = check_against_ptxas(pruned, tmp_path)
    assert checked["duplicate"] == pruned.counts()["duplicate"] >= 1


def test_compiles_run_in_the_compile_pool_under_its_deadline() -> None:
    subject = liger("_rms_norm_forward_kernel")
    d = narrowed(derive_space(subject), [subject.default, Config({}, 8, 3)])
    seen: list[int] = []
    pruned = prune(d, jobs=1, on_progress=lambda done, total, point: seen.append(done))
    assert pruned.jobs == 1 and seen == [1, 2] and len(pruned.kept) == 2
    late = prune(d, jobs=1, timeout=0.5)  # a fresh process imports Triton and Liger for longer than that
    assert [v.reason for v in late.verdicts] == ["compile-error", "compile-error"]
    assert all("compile_timeout" in v.detail for v in late.verdicts)


# ----------------------------------------------------------------------------------------------
# The command


def test_kbuild_tune_dry_run_reports_the_space_and_the_prunes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", "--recording", str(LIGER), "--dry-run", "--only", "_rms_norm_forward_kernel",
                 "--max-points", "4", "--jobs", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    (k,) = doc["kernels"]
    assert doc["target"] == "sm_90" and k["name"] == "_rms_norm_forward_kernel" and k["size"] == len(k["points"]) <= 4
    assert set(k["pruned"]) == set(REASONS) and k["kept"] + sum(k["pruned"].values()) == k["size"]
    assert k["origin"]["specialization"] and k["space"]["thinned"] and k["points"][0]["kept"]
    assert k["space"]["dimensions"]["num_warps"]["why"] and k["space"]["left_out"]
    # half and twice the recorded block size went to the output check (Triton's interpreter on this CPU), each with
    # its verdict and why
    checks = k["space"]["output_checks"]
    assert [c["constexprs"] for c in checks] == [{"BLOCK_SIZE": 64}, {"BLOCK_SIZE": 256}]
    assert all(c["why"] for c in checks)
    code = main(["tune", "--recording", str(LIGER), "--dry-run", "--only", "_rms_norm_forward_kernel",
                 "--max-points", "2", "--jobs", "1"])
    _, err = capsys.readouterr()
    assert code == 0 and "_rms_norm_forward_kernel" in err and "spills" in err


@pytest.mark.parametrize(("argv", "names"), [
    (["--recording", "{missing}", "--dry-run"], ["--recording", "missing.json"]),
    (["--recording", "{notjson}", "--dry-run"], ["--recording", "bad.json"]),
    (["--recording", "{liger}"], ["--dry-run"]),
    (["--recording", "{liger}", "--dry-run", "--only", "no_such_kernel"], ["no_such_kernel", "_rms_norm"]),
    (["--recording", "{liger}", "--dry-run", "--max-points", "0"], ["--max-points"]),
    (["--dry-run"], ["--recording", "--suite"]),
    (["--suite", "--recording", "{liger}", "--dry-run"], ["--recording", "--suite"]),
    (["--derive-space", "--config", "{missing}"], ["--derive-space", "--suite"]),
    (["--suite", "--derive-space", "--levels", "sass"], ["--derive-space", "--levels sass"]),
])
def test_bad_dry_run_input_is_one_error_line(argv: list[str], names: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    paths = {"missing": str(tmp_path / "missing.json"), "notjson": str(tmp_path / "bad.json"), "liger": str(LIGER)}
    code = main(["tune", *(a.format(**paths) for a in argv)])
    _, err = capsys.readouterr()
    assert_clean_error(code, err, names=names)
    assert not any(p.name != "bad.json" for p in tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------
# Every recorded Liger kernel


#: Points per kernel in CI (the default is 128: 1,140 points over the 20 kernels took 679 s on 2 shared cores); the
#: space is thinned in its fixed order, so every kernel still gets a derived space with its prunes.
MAX_POINTS_IN_CI = 24


@pytest.mark.slow
def test_every_recorded_liger_kernel_gets_a_derived_pruned_space(tmp_path: Path) -> None:
    """Each of the recording's kernels (its most-called sm_90 specialisation): the derived space, pruned, and up to
    three kept points, three spills prunes and three duplicates per kernel checked against ptxas run again."""
    rec = _recording()
    kernels = find_kernels(rec, None, where=str(LIGER))
    assert len(kernels) == 20
    totals = dict.fromkeys(REASONS, 0)
    for kernel in kernels:
        spec = pick_specialization(kernel, SM90)
        assert spec is not None, kernel.function
        pruned = prune(derive_space(from_recording(rec, kernel, spec), max_points=MAX_POINTS_IN_CI), keep_code=True)
        assert pruned.verdicts[0].kept, kernel.function  # the recorded configuration compiles and stays
        # the only points Triton 3.6 cannot compile: clusters on the two-dot up-projection (PlanCTA fails)
        failed = [v for v in pruned.pruned if v.reason == "compile-error"]
        assert all(v.config.num_ctas == 2 and "PlanCTA" in v.detail for v in failed), [v.detail for v in failed][:2]
        check_against_ptxas(pruned, tmp_path, limit=3)
        for reason, n in pruned.counts().items():
            totals[reason] += n
    assert totals["spills"] and totals["duplicate"] and totals["occupancy"]
