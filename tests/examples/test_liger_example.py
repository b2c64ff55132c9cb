"""examples/liger (issue 16 part 5, issue 34 part 5): Liger-Kernel 0.8.5 from the package index, unpatched,
declared by recordings (``examples/liger/recordings/``: Liger's own test files recorded on an H100, and
``workload.py``, Liger's wrappers at Llama-like shapes on CPU tensors) and one hand-written declaration (rms_norm's
forward, the format's example).

1. Resolving the example (keys, no compile) declares every recorded specialisation: the build's
   :class:`~kbuild.build.recorded.RecordingReport` has none not built.
2. Liger's *own* wrapper calls at the Llama shapes key to an entry the build declares: the wrapper runs on CPU
   tensors with ``JITFunction.run``/``Autotuner.run`` replaced by a recorder (nothing launches, nothing compiles),
   the recorded call goes through Triton's own binder (:func:`kbuild.runtime.keys.specialization_for_call`), and
   the key the run time computes from it must be the baseline key of a declared entry of the same function and
   target (keys compared, not names): the runtime's exact match would hit on the GPU.
3. The wheel built through kbuild's PEP 517 backend from the Llama-shape recording alone (``KBUILD_RECORDINGS``: ~100
   entries, not ~1,600) ships ``kbx_liger/_kbuild/`` with an entry per recorded specialisation × target, listed by
   ``kbuild inspect``.

Needs ``liger-kernel==0.8.5`` installed with ``--no-deps`` (its dependencies are torch and triton).
"""

from __future__ import annotations

import importlib.metadata as _md
import json
import math
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "liger"
LIGER_VERSION = "0.8.5"

_installed: str | None
try:
    _installed = _md.version("liger-kernel")
except _md.PackageNotFoundError:
    _installed = None
pytestmark = pytest.mark.skipif(
    _installed != LIGER_VERSION,
    reason=f"needs liger-kernel=={LIGER_VERSION} (pip install --no-deps liger-kernel=={LIGER_VERSION}); "
           f"found {_installed!r}")

ROWS, HIDDEN, INTER, VOCAB = 4096, 4096, 11008, 32000
#: SMs of an H100 (SXM): rms_norm's backward passes rows_per_program = ceil(rows / SMs).
H100_SMS = 132
TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def _record_calls(run_wrapper: Callable[[], Any]) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """Run one of Liger's wrappers with every ``kernel[grid](...)`` recorded instead of launched."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def jit_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        calls.append((self, args, kwargs))

    def autotuner_run(self: Any, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> None:
        calls.append((self, args, kwargs))

    with mock.patch.object(JITFunction, "run", jit_run), mock.patch.object(Autotuner, "run", autotuner_run):
        run_wrapper()
    return calls


def _liger_calls(dtype_name: str) -> dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """Each declared kernel's call, as Liger 0.8.5's wrappers make it for the shapes of ``kbx_liger.SHAPES``."""
    import torch
    from liger_kernel.ops import cross_entropy, dyt, geglu, layer_norm, rms_norm, swiglu

    dt = getattr(torch, TORCH_DTYPES[dtype_name])
    x = torch.randn(ROWS, HIDDEN).to(dt)
    w = torch.ones(HIDDEN, dtype=dt, requires_grad=True)
    out: dict[str, Any] = {}

    def one(name: str, fn: Callable[[], Any]) -> None:
        calls = _record_calls(fn)
        assert len(calls) == 1, (name, len(calls))
        out[name] = calls[0]

    state: dict[str, Any] = {}

    def rms_fwd() -> None:
        state["fwd"] = rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)

    one("rms_norm_fwd", rms_fwd)
    _y, xv, rstd, block, warps, mode = state["fwd"]
    rstd = torch.empty(ROWS, dtype=torch.float32)  # the recorder did not run the kernel; any values do
    one("rms_norm_bwd", lambda: rms_norm.rms_norm_backward(torch.randn(ROWS, HIDDEN).to(dt), xv, w, rstd, 0.0, mode,
                                                           block, warps, True, None, needs_dw=True))
    a, b = torch.randn(ROWS, INTER).to(dt), torch.randn(ROWS, INTER).to(dt)
    one("swiglu_fwd", lambda: swiglu.swiglu_forward(a, b, 1.0))
    one("geglu_fwd", lambda: geglu.geglu_forward(a, b))
    one("layer_norm_fwd", lambda: layer_norm.layer_norm_forward(x, w, torch.zeros(HIDDEN, dtype=dt), 1e-5))
    logits = torch.randn(ROWS, VOCAB).to(dt).requires_grad_(True)
    target = torch.randint(0, VOCAB, (ROWS,))
    one("cross_entropy", lambda: cross_entropy.cross_entropy_forward(logits, target, None, -100, 0.0, 0.0, "mean",
                                                                     None, False))
    alpha, gamma, beta = torch.ones(1, dtype=dt), torch.ones(HIDDEN, dtype=dt), torch.zeros(HIDDEN, dtype=dt)
    one("dyt_fwd", lambda: dyt.liger_dyt_fwd(x, alpha, gamma, beta))
    return out


@pytest.fixture(scope="module")
def resolved() -> tuple[list[Any], Any]:
    """The example's builds as the build makes them (hand-written, then the recordings' entries not already
    declared), keyed, nothing compiled; and the recordings' report."""
    from kbuild.build.recorded import collapse, recorded_builds
    from kbuild.build.resolve import resolve, select_targets
    from kbuild.settings.sources import load_settings

    settings = load_settings(EXAMPLE / "pyproject.toml")
    targets = select_targets(settings, None)
    declared = resolve(settings, settings.kernels, targets)
    recorded, report = recorded_builds(settings, targets)
    return collapse(declared, recorded, report), report


def test_the_example_declares_every_recorded_specialisation_for_two_targets(resolved: tuple[list[Any], Any]) -> None:
    from kbuild.record import format as fmt

    builds, report = resolved
    recordings = [fmt.load(str(EXAMPLE / name)) for name in report.recordings]
    assert report.recordings == ["recordings/liger-tests.h100.json", "recordings/llama-shapes.cpu.json"]
    assert report.specializations == sum(len(k.specializations) for r in recordings for k in r.kernels.values())
    assert report.not_built == 0, [line for line in report.lines if "not built" in line]
    # Each distinct declaration is an entry for sm_80 and sm_90; the hand-written rms_norm forward (fp16, bf16) is
    # one of them, built once.
    assert report.built + report.collapsed == 2 * report.declarations and report.collapsed == 4
    hand = [b for b in builds if b.recorded is None]
    assert sorted((b.spec.name, b.target.name) for b in hand) == [(f"rms_norm_fwd_dtype_{d}", t) for d in ("bf16", "fp16")
                                                                  for t in ("sm_80", "sm_90")]
    assert {b.target.name for b in builds} == {"sm_80", "sm_90"} and len(builds) == 4 + report.built
    assert len({(b.baseline_key.hex) for b in builds}) == len(builds)
    for b in builds:
        assert b.spec.module.startswith("liger_kernel.ops.")
        assert b.baseline_key.components["kernel"]["distribution"] == {"name": "liger_kernel",
                                                                       "version": LIGER_VERSION}


def _declared_key(builds: list[Any], jit: Any, call: Any, target: str) -> str | None:
    """The declared entry (of ``builds``) the run time's exact match finds for ``call`` on ``target``: its name."""
    from kbuild.runtime.keys import installed_distribution

    function = f"{jit.fn.__module__}:{jit.fn.__qualname__}"
    for b in builds:
        if b.target.name != target or b.spec.source != function:
            continue
        comps = b.baseline_key.components
        key = call.key(ptxas_version=comps["compiler"]["ptxas"], declared=b.spec.signature,
                       distribution=installed_distribution({"key_components": comps}))
        if key.hex == b.baseline_key.hex:
            return str(b.spec.name)
    return None


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_liger_own_calls_key_to_entries_the_build_declares(resolved: tuple[list[Any], Any], dtype_name: str) -> None:
    from triton.runtime.autotuner import Autotuner

    from kbuild.runtime.keys import specialization_for_call

    builds, _ = resolved
    calls = _liger_calls(dtype_name)
    assert set(calls) == {"rms_norm_fwd", "rms_norm_bwd", "swiglu_fwd", "geglu_fwd", "layer_norm_fwd",
                          "cross_entropy", "dyt_fwd"}
    checked = 0
    for op, (runner, args, kwargs) in calls.items():
        jit = runner.fn if isinstance(runner, Autotuner) else runner
        # @triton.autotune: the autotuner launches any of its configs (the one it picks): each must be declared.
        configs = runner.configs if jit is not runner else [None]
        assert len(configs) == (18 if op == "dyt_fwd" else 1)
        for cfg in configs:
            kw = kwargs if cfg is None else {**kwargs, **cfg.kwargs, "num_warps": cfg.num_warps,
                                             "num_stages": cfg.num_stages}
            for target, cc in (("sm_80", 80), ("sm_90", 90)):
                call = specialization_for_call(jit, *args, cc=cc, **kw)
                assert call.unsupported is None, (op, call.unsupported)
                assert _declared_key(builds, jit, call, target) is not None, (op, target, cfg)
                checked += 1
    assert checked == 2 * (6 + 18)
    # The hand-written declaration is the one the rms_norm forward call finds (the recording's is built once, as it).
    from liger_kernel.ops import rms_norm

    runner, args, kwargs = calls["rms_norm_fwd"]
    call = specialization_for_call(rms_norm._rms_norm_forward_kernel, *args, cc=90, **kwargs)
    assert _declared_key(builds, rms_norm._rms_norm_forward_kernel, call, "sm_90") == \
        f"rms_norm_fwd_dtype_{dtype_name}"


def test_a_tuning_build_tunes_the_hand_written_rms_norm_from_the_recorded_call() -> None:
    """The hand-written rms_norm forward declaration has no bench spec and no space: with tuning on, the recorded
    call of the same key (Llama-3-8B's, bf16) takes its place, built once, with a bench spec from the recording
    and a derived space (issue 35's target counts rms_norm); with tuning off the hand-written entry stays."""
    import dataclasses

    from kbuild.build.pipeline import resolve_builds
    from kbuild.build.resolve import select_targets
    from kbuild.settings.model import TuneMode
    from kbuild.settings.sources import load_settings

    base = dataclasses.replace(load_settings(EXAMPLE / "pyproject.toml"), recordings=["recordings/llama3-8b.cpu.json"])
    targets = [t for t in select_targets(base, None) if t.name == "sm_90"]
    rms = "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel"

    def forward(tune: TuneMode) -> tuple[list[Any], Any]:
        builds, _, _, report = resolve_builds(dataclasses.replace(base, tune=tune), base.kernels, targets)
        return [b for b in builds if b.spec.source == rms or b.spec.name.startswith("rms_norm_fwd")], report

    off, _ = forward("off")
    assert sorted(b.spec.name for b in off) == ["rms_norm_fwd_dtype_bf16", "rms_norm_fwd_dtype_fp16"]
    on, report = forward("auto")
    (recorded,) = [b for b in on if b.recorded is not None]
    (kept,) = [b for b in on if b.recorded is None]
    assert kept.spec.name == "rms_norm_fwd_dtype_fp16"  # Llama-3's recording is bf16 only
    assert recorded.spec.bench and len(recorded.space) > 1 and recorded.recorded.derived is not None
    assert recorded.baseline_key.hex == next(b for b in off if b.spec.name.endswith("bf16")).baseline_key.hex
    assert any("as 'rms_norm_fwd_dtype_bf16' too, with no bench spec or space: built once, tuned from the recorded "
               "call" in line for line in report.lines), report.lines


def test_rms_norm_backward_rows_per_program_keys_as_on_an_h100(resolved: tuple[list[Any], Any]) -> None:
    """On CPU Liger's backward takes one SM (rows_per_program = rows, as workload.py was recorded); on an H100 it is
    ceil(rows / 132). The call with the H100's value must key to a declared sm_90 entry too, else the CPU recording
    would not answer the GPU's call."""
    from liger_kernel.ops import rms_norm

    from kbuild.runtime.keys import specialization_for_call

    builds, _ = resolved
    for dtype_name in ("fp16", "bf16"):
        jit, args, kwargs = _liger_calls(dtype_name)["rms_norm_bwd"]
        assert jit is rms_norm._rms_norm_backward_kernel
        i = jit.arg_names.index("rows_per_program")
        assert args[i] == ROWS  # one SM on a CPU
        on_h100 = (*args[:i], math.ceil(ROWS / H100_SMS), *args[i + 1:])
        call = specialization_for_call(jit, *on_h100, cc=90, **kwargs)
        assert _declared_key(builds, jit, call, "sm_90") is not None, dtype_name


def test_a_call_off_the_recorded_shapes_misses(resolved: tuple[list[Any], Any]) -> None:
    """A hidden size nobody recorded (5120: another BLOCK_SIZE and num_warps) keys to no declared entry: Triton
    compiles it."""
    import torch
    from liger_kernel.ops import rms_norm

    from kbuild.runtime.keys import specialization_for_call

    builds, _ = resolved
    x, w = torch.randn(ROWS, 5120).half(), torch.ones(5120).half()
    ((jit, args, kwargs),) = _record_calls(lambda: rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None))
    for target, cc in (("sm_80", 80), ("sm_90", 90)):
        assert _declared_key(builds, jit, specialization_for_call(jit, *args, cc=cc, **kwargs), target) is None
    # ... while the same call at hidden 4096 finds one (the miss is the shape's).
    x, w = torch.randn(ROWS, HIDDEN).half(), torch.ones(HIDDEN).half()
    ((jit, args, kwargs),) = _record_calls(lambda: rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None))
    assert _declared_key(builds, jit, specialization_for_call(jit, *args, cc=90, **kwargs), "sm_90") is not None


@pytest.mark.slow
def test_the_backend_wheel_from_the_llama_shape_recording_ships_every_entry(tmp_path: Path) -> None:
    """The example built through the PEP 517 backend from recordings/llama-shapes.cpu.json alone (KBUILD_RECORDINGS;
    the hand-written declaration stays): an entry per recorded specialisation × target, each with its cubin."""
    sys.path.insert(0, str(ROOT / "tests" / "hooks"))
    try:
        from hooks_helpers import build_env, copy_project, kbuild_cli, pip_wheel
    finally:
        sys.path.pop(0)
    from kbuild.record import format as fmt

    rec = fmt.load(str(EXAMPLE / "recordings" / "llama-shapes.cpu.json"))
    recorded = {(f"{k.module}:{k.qualname}", s.target) for k in rec.kernels.values() for s in k.specializations.values()}
    n = sum(len(k.specializations) for k in rec.kernels.values())
    env = build_env(tmp_path / "store", XDG_CACHE_HOME=str(tmp_path / "xdg"), TRITON_CACHE_DIR=str(tmp_path / "tc"),
                    KBUILD_RECORDINGS="recordings/llama-shapes.cpu.json")
    project = copy_project(EXAMPLE, tmp_path / "src" / "liger")
    pip_wheel(project, tmp_path / "dist", env)
    wheel = tmp_path / "dist" / "kbx_liger-0.1.0-py3-none-any.whl"
    zf = zipfile.ZipFile(wheel)
    assert not any(name.startswith("liger_kernel/") for name in zf.namelist())
    index = json.loads(zf.read("kbx_liger/_kbuild/index.json"))
    assert index["package"] == "kbx_liger"
    entries = list(index["entries"].values())
    # Each recorded specialisation (workload.py was recorded for sm_80 and sm_90) is one entry; the hand-written
    # rms_norm forward is two of them, built once.
    assert len(entries) == n == 96
    assert {(e["function"], e["target"]["name"]) for e in entries} == recorded
    assert sum(1 for e in entries if e["function"].endswith(":_dyt_fwd_kernel")) == 2 * 2 * 18
    inspect = kbuild_cli("inspect", str(wheel), "--json", env=env)
    assert inspect.returncode == 0, inspect.stderr[-2000:]
    (data,) = json.loads(inspect.stdout)["package_data"]
    assert len(data["entries"]) == n and all(e["cubin_check"] == "ok" for e in data["entries"])
