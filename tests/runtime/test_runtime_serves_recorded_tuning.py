"""Issue 35's whole path on a CPU: record → inputs → tune on the cost model → ship → the run time serves the tuned
configuration, and the per-kernel report (the derived space, what was pruned and why, the search, the choice).

examples/jit-package's softmax is recorded as its package calls it (``kbuild record --mode cpu``, launches recorded
instead of run); a project declares nothing but that recording. With ``tune = "auto"`` the build gives the recorded
plain ``@triton.jit`` kernel a bench spec made from the recorded call and a space derived from what cannot change
its results; the tune phase's two levels run with the CPU cost model as the measurer (**a labelled stand-in for the
GPU**: the model's estimate, not a measurement, so the prewarm never ships such a result; shipped here only to drive
the path to the end); the package data files the chosen configuration under the recorded call's key with
``serves_call``; and a call exactly as the package makes it (one warp per row, ``num_warps=1``) gets that cubin,
launched with the tuned warps, through Triton's real JIT on a CPU (``runtime_helpers.FakeDriver``: load and launch
are recording stand-ins) with Triton's compiler made to raise.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from block_kernels import BLOCK_KERNELS
from test_runtime_zero_jit import no_compiler  # noqa: F401  (fixture)

import kbuild.runtime

ROOT = Path(__file__).resolve().parents[2]
JIT_EXAMPLE = ROOT / "examples" / "jit-package"


#: The package's call: examples/jit-package's softmax launched with one warp per 1,024-wide row (a package's rule
#: written once), which the tuner can beat by options alone.
WORKLOAD = """
import sys
sys.path.insert(0, {example!r})
import torch
from kbx_jit import kernels
x = torch.randn(64, 1024).half()
out = torch.empty_like(x)
kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=1, num_stages=3)
"""


def call(kernels: Any) -> None:
    import torch

    x = torch.randn(64, 1024).half()
    out = torch.empty_like(x)
    kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=1, num_stages=3)


@pytest.fixture(scope="module")
def recorded_project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """examples/jit-package's softmax recorded on a CPU, and a project that declares it by that recording alone."""
    import shutil

    from kbuild.settings.sources import load_settings

    tmp = tmp_path_factory.mktemp("recorded-tuning")
    rec = tmp / "softmax.recording.json"
    (tmp / "workload.py").write_text(WORKLOAD.format(example=str(JIT_EXAMPLE)))
    done = subprocess.run([sys.executable, "-m", "kbuild", "record", "--mode", "cpu", "--target", "sm_90", "--out",
                           str(rec), "--", sys.executable, str(tmp / "workload.py")],
                          capture_output=True, text=True, timeout=600, cwd=tmp, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    project = tmp / "proj"
    shutil.copytree(JIT_EXAMPLE / "kbx_jit", project / "kbx_jit", ignore=shutil.ignore_patterns("_kbuild"))
    (project / "pyproject.toml").write_text(
        '[project]\nname = "kbx-jit"\nversion = "0.1.0"\n\n[tool.kbuild]\nship = "package-data"\n'
        'targets = ["sm_90"]\ntune = "auto"\nrecordings = ["../softmax.recording.json"]\n'
        'budget = { evaluations = 600 }\n')  # level 1's share sweeps the pruned space (18 points)
    return dataclasses.replace(load_settings(project / "pyproject.toml"), store=tmp / "store")


def test_record_tune_on_the_cost_model_ship_and_serve(recorded_project: Any, fake_gpu: Any, tmp_path: Path,
                                                      request: pytest.FixtureRequest,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.tuning import tune_build

    settings = recorded_project
    (b,) = run_pipeline(settings)
    # the recorded call as the declaration: a bench spec from the recording, a derived space (the recorded
    # configuration first), and no hand-written field
    assert b.recorded is not None and b.spec.bench is not None
    assert b.spec.bench.startswith("kbuild.bench.recorded:recorded_spec?")
    assert "specialization=" in b.spec.bench and "target=sm_90" in b.spec.bench
    assert len(b.space) > 1 and b.space[0] == b.spec.default_config()
    assert b.space[0]["num_warps"] == 1 and {p["num_warps"] for p in b.space} > {1}
    # half and twice the block size are proposed to the output check, which the tune phase runs (where the space is
    # searched); the tuned key names them whatever its verdicts
    assert {p["constexprs"]["BLOCK"] for p in b.space} == {1024} and b.recorded.output_check is not None
    assert b.tuned_key is not None
    assert b.tuned_key.components["tuner"]["constexpr_candidates"] == [{"BLOCK": 512}, {"BLOCK": 2048}]
    assert b.tuned_key.components["tuner"]["space"]

    import kbuild.build.tuning as tuning
    from kbuild.cache import open_store

    # the tune phase as a build on a GPU machine runs it (a GPU of the target stands in as present, the cost model
    # measures: labelled stand-ins), writing the per-kernel report where the reports setting says
    settings = dataclasses.replace(settings, reports=str(tmp_path / "reports"))
    monkeypatch.setattr(tuning, "can_tune", lambda s, build: True)
    # a peer for the package's softmax (Liger's kernels have theirs in FUNCTION_PEERS): on the cost model it is
    # named in the report and not timed
    from kbuild.bench import peers as peer_mod

    torch_softmax = peer_mod.Peer("torch_softmax", "torch.softmax", lambda spec, x: lambda: {})
    monkeypatch.setitem(peer_mod.FUNCTION_PEERS, f"{b.fn.fn.__module__}:{b.fn.fn.__qualname__}", [torch_softmax])
    baseline = b.artefact
    tuning.tune_missing(settings, [b], open_store(settings), lambda s, build: tune_build(s, build, measure="model"),
                        None)
    art, b.artefact = b.shipped, baseline
    assert b.tuned and art.key == b.tuned_key.hex
    pages = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert pages == [f"{b.spec.name}.sm_90.tune.html", f"{b.spec.name}.sm_90.tune.json"]
    page_html = (tmp_path / "reports" / pages[0]).read_text()
    assert "Space: derived and pruned" in page_html and "CPU estimate" in page_html
    assert "<svg class=curve id=curve1" in page_html  # the search curve, drawn from the report
    assert art.meta["tuned"] is True and "cost model" in art.meta["tune_decision"]
    report = art.meta["tune_report"]
    assert report["level1"]["backend"].startswith("cost-model")
    # the per-kernel report: the derived space, what the CPU pruned before measuring and why, the search, the choice
    space = report["space"]
    # BLOCK=2048 was shown safe by checking outputs on the recorded call with its grid (Triton's interpreter on this
    # CPU: the row's mask covers the larger block), and searched; 512 leaves half of each row unwritten
    assert [c["accepted"] for c in space["space"]["output_checks"]] == [False, True]
    assert space["space"]["constexprs_shown_safe"] == ["BLOCK"]
    assert {p["config"]["constexprs"]["BLOCK"] for p in space["points"]} == {1024, 2048}
    assert space["kept"] + sum(space["pruned"].values()) == space["size"]
    assert report["level1"]["space_size"] == space["searched"] <= space["kept"] + 1
    assert all(p["reason"] for p in space["points"] if not p["kept"])
    from kbuild.tune.report_html import render_report_html

    page = render_report_html(report, b.shipped.cubin, art.cubin, kernel_symbol="softmax")
    assert "Space: derived and pruned" in page and f"{space['size']} points derived" in page
    assert "id=outputchecks" in page and "<code>BLOCK=2048</code></td><td><span class=ok>shown safe" in page
    assert "<code>BLOCK=512</code></td><td><span class=bad>left out" in page
    assert report["peers"] == {"not_timed": "the CPU cost model times kbuild's kernels only; a GPU build times the "
                               "peers", "peers": [{"label": "torch_softmax", "name": "torch.softmax"}]}
    assert "Peers: what a user would call instead" in page and "Peers not timed" in page
    assert "Level 1: configurations" in page
    chosen = art.meta["config"]
    assert chosen != b.default_config and chosen["constexprs"] == {"BLOCK": 1024}
    assert art.meta["triton_metadata"]["num_warps"] == chosen["num_warps"]

    tuned = dataclasses.replace(b)
    tuned.artefact, tuned.tuned = art, True
    shipped = write_package_data(settings, [tuned], tmp_path / "kbx_jit")
    ((key, entry),) = shipped.index["entries"].items()
    assert key == b.baseline_key.hex  # the recorded call's key
    asked = {n: b.default_config[n] for n in entry["serves_call"]}
    assert entry["serves_call"] == asked and set(asked) <= {"num_warps", "num_stages", "maxnreg", "ptx_options"}
    assert entry["cubin_sha256"] == art.cubin_sha256

    compiler_calls = request.getfixturevalue("no_compiler")  # from here on, compiling fails the test
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kernels = sys.modules[b.fn.fn.__module__]  # the package's module, as the build imported it
    kernels.softmax.device_caches.clear()
    call(kernels)  # the package's own call, as recorded: num_warps=1
    assert compiler_calls == [] and [c for _, c, _, _ in fake.loads] == [art.cubin]
    (kernel,) = kernels.softmax.device_caches[0][0].values()
    assert kernel.metadata.num_warps == chosen["num_warps"]
    (event,) = [e for e in kbuild.runtime.events() if e.stage == "zero-jit"]
    assert "serves this call" in event.reason


def kernels_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, kernels: str, workload: str,
                    tool: str = "") -> Any:
    """A project whose package ``package`` holds ``kernels`` (a module's source), declared by nothing but a
    recording of ``workload`` (a script importing it) made on this CPU; its settings, with tune = "auto"."""
    import dataclasses

    from kbuild.settings.sources import load_settings

    project = tmp_path / "proj"
    (project / package).mkdir(parents=True)
    (project / package / "__init__.py").write_text("")
    (project / package / "kernels.py").write_text(kernels)
    (tmp_path / "workload.py").write_text(f"import sys\nsys.path.insert(0, {str(project)!r})\n" + workload)
    rec = tmp_path / f"{package}.recording.json"
    done = subprocess.run([sys.executable, "-m", "kbuild", "record", "--mode", "cpu", "--target", "sm_90", "--out",
                           str(rec), "--", sys.executable, str(tmp_path / "workload.py")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "{package.replace("_", "-")}"\nversion = "0.1.0"\n\n[tool.kbuild]\n'
        f'ship = "package-data"\ntargets = ["sm_90"]\ntune = "auto"\nrecordings = ["../{rec.name}"]\n{tool}')
    monkeypatch.syspath_prepend(str(project))
    return dataclasses.replace(load_settings(project / "pyproject.toml"), store=tmp_path / "store")


DTYPE_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def scale_cast(x_ptr, y_ptr, n, scale, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, (x * scale).to(OUT_DTYPE), mask=mask)
'''

DTYPE_CALL = """
import torch
import triton.language as tl
from kbx_dt import kernels
x = torch.randn(4096 * 64)
y = torch.empty(4096 * 64, dtype=torch.float16)
kernels.scale_cast[(64,)](x, y, x.numel(), 0.5, OUT_DTYPE=tl.float16, BLOCK=4096, num_warps=1)
"""


def test_a_kernel_with_a_dtype_constexpr_is_tuned_and_served(fake_gpu: Any, tmp_path: Path,
                                                             request: pytest.FixtureRequest,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A dtype constexpr (``OUT_DTYPE=tl.float16``, recorded as ``{"dtype": "fp16"}``; conch's GEMM has them) is a
    constant of every point of the derived space: the search compiles each point with Triton's dtype, the choice
    ships under the recorded call's key and the call as the package makes it gets it."""
    import dataclasses

    import kbuild.build.tuning as tuning
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.tuning import tune_build
    from kbuild.cache import open_store

    settings = kernels_project(tmp_path, monkeypatch, "kbx_dt", DTYPE_KERNEL, DTYPE_CALL,
                               "budget = { evaluations = 200 }\n")
    said: list[Any] = []
    (b,) = run_pipeline(settings, on_recordings=said.append)
    assert not [line for r in said for line in r.lines if "not tuned" in line]
    assert len(b.space) > 1 and all(p["constexprs"]["OUT_DTYPE"] == {"dtype": "fp16"} for p in b.space)
    monkeypatch.setattr(tuning, "can_tune", lambda s, build: True)
    baseline = b.artefact
    tuning.tune_missing(settings, [b], open_store(settings), lambda s, build: tune_build(s, build, measure="model"),
                        None)
    art, b.artefact = b.shipped, baseline
    assert b.tuned and art.meta["config"]["num_warps"] != 1  # the cost model's choice (a labelled stand-in)
    assert art.meta["config"]["constexprs"] == {"BLOCK": 4096, "OUT_DTYPE": {"dtype": "fp16"}}
    tuned = dataclasses.replace(b)
    tuned.artefact, tuned.tuned = art, True
    shipped = write_package_data(settings, [tuned], tmp_path / "kbx_dt")
    ((key, entry),) = shipped.index["entries"].items()
    assert key == b.baseline_key.hex and entry["serves_call"]["num_warps"] == 1

    compiler_calls = request.getfixturevalue("no_compiler")
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_dt", data_dir=shipped.data_dir)
    import torch
    import triton.language as tl

    kernels = sys.modules[b.fn.fn.__module__]
    kernels.scale_cast.device_caches.clear()
    x = torch.randn(4096 * 64)
    y = torch.empty(4096 * 64, dtype=torch.float16)
    kernels.scale_cast[(64,)](x, y, x.numel(), 0.5, OUT_DTYPE=tl.float16, BLOCK=4096, num_warps=1)
    assert compiler_calls == [] and [c for _, c, _, _ in fake.loads] == [art.cubin]
    (event,) = [e for e in kbuild.runtime.events() if e.stage == "zero-jit"]
    assert "serves this call" in event.reason



ROW_SUM_CALL = """
import torch
from kbx_rs import kernels
x = torch.randn(64, 4000)
kernels.row_sum[(64,)](torch.empty(64), x, 4000, BLOCK_SIZE=64, num_warps=1)
"""


def test_a_block_size_shown_safe_by_checking_outputs_is_tuned_and_served(fake_gpu: Any, tmp_path: Path,
                                                                         request: pytest.FixtureRequest,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35 part 2's other way in: a plain ``@triton.jit`` kernel whose block size nothing declares tunable.
    The build checks half and twice the recorded ``BLOCK_SIZE`` on the recorded call with its own grid (Triton's
    interpreter on this CPU: the loop over the row takes either), both join the derived space, the cost model (a
    labelled stand-in) picks another block, and the call exactly as the package makes it (``BLOCK_SIZE=64``, one
    warp) gets the tuned cubin: ``serves_call`` lists the block the call asks beside its options."""
    import dataclasses

    import kbuild.build.tuning as tuning
    from kbuild.build.package_data import write_package_data
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.tuning import tune_build
    from kbuild.cache import open_store

    settings = kernels_project(tmp_path, monkeypatch, "kbx_rs", BLOCK_KERNELS, ROW_SUM_CALL,
                               "budget = { evaluations = 2000 }\n")
    (b,) = run_pipeline(settings)
    # the build resolves the launch-option points and names the candidates in the tuned key (the question, the same
    # wherever the check later runs: a CPU build finds what a GPU prewarm tuned)
    assert {p["constexprs"]["BLOCK_SIZE"] for p in b.space} == {64}
    assert b.tuned_key is not None
    tuner = b.tuned_key.components["tuner"]
    assert tuner["constexpr_candidates"] == [{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 128}]
    monkeypatch.setattr(tuning, "can_tune", lambda s, build: True)
    baseline = b.artefact
    tuning.tune_missing(settings, [b], open_store(settings), lambda s, build: tune_build(s, build, measure="model"),
                        None)
    art, b.artefact = b.shipped, baseline
    chosen = art.meta["config"]
    assert b.tuned and chosen["constexprs"]["BLOCK_SIZE"] != 64  # the cost model's choice (a labelled stand-in)
    checks = art.meta["tune_report"]["space"]["space"]["output_checks"]
    assert [c["accepted"] for c in checks] == [True, True] and all("interpreter" in c["why"] for c in checks)
    tuned = dataclasses.replace(b)
    tuned.artefact, tuned.tuned = art, True
    shipped = write_package_data(settings, [tuned], tmp_path / "kbx_rs")
    ((key, entry),) = shipped.index["entries"].items()
    assert key == b.baseline_key.hex and entry["cubin_sha256"] == art.cubin_sha256
    assert entry["serves_call"]["constexprs"] == {"BLOCK_SIZE": 64}
    assert entry["serves_call"].get("num_warps", 1) == 1 and "shown safe by checking outputs" in entry["note"]

    compiler_calls = request.getfixturevalue("no_compiler")
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_rs", data_dir=shipped.data_dir)
    import torch

    kernels = sys.modules[b.fn.fn.__module__]
    kernels.row_sum.device_caches.clear()
    x = torch.randn(64, 4000)
    kernels.row_sum[(64,)](torch.empty(64), x, 4000, BLOCK_SIZE=64, num_warps=1)
    assert compiler_calls == [] and [c for _, c, _, _ in fake.loads] == [art.cubin]
    (event,) = [e for e in kbuild.runtime.events() if e.stage == "zero-jit"]
    assert "serves this call" in event.reason and "BLOCK_SIZE shown safe" in event.reason


GATHER_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def gather(x_ptr, idx_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + tl.load(idx_ptr + offs)))
'''

GATHER_CALL = """
import torch
from kbx_gather import kernels
x = torch.randn(1024)
idx = torch.randint(0, 1024, (256,))
y = torch.empty(256)
kernels.gather[(1,)](x, idx, y, BLOCK=256, num_warps=1)
"""


def test_a_recorded_call_no_spec_can_be_made_of_ships_its_baseline_before_any_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An index tensor with no capture: the tune phase says why and ships the baseline, without compiling the
    derived space first (the space of each such specialisation took minutes of CPU for nothing)."""
    import logging

    import kbuild.build.tuning as tuning
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.tuning import tune_build
    from kbuild.cache import open_store

    settings = kernels_project(tmp_path, monkeypatch, "kbx_gather", GATHER_KERNEL, GATHER_CALL)
    (b,) = run_pipeline(settings)
    assert len(b.space) > 1
    pruned: list[Any] = []

    def pruned_space(*a: Any, **k: Any) -> tuple[list[dict[str, Any]], None]:
        pruned.append(a)
        return list(b.space), None

    monkeypatch.setattr(tuning, "_pruned_space", pruned_space)
    monkeypatch.setattr(tuning, "can_tune", lambda s, build: True)
    with caplog.at_level(logging.WARNING, logger="kbuild.build.tuning"):
        tuning.tune_missing(settings, [b], open_store(settings),
                            lambda s, build: tune_build(s, build, measure="model"), None)
    assert not b.tuned and pruned == [] and "untuned: tuning failed" in b.status
    assert "idx_ptr: integer and bool values may be indices" in caplog.text and "shipping the baseline" in caplog.text
