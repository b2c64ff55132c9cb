"""examples/liger (issue 16, part 5): Liger-Kernel 0.8.5 from the package index, unpatched, declared in
``examples/liger/pyproject.toml``.

1. Each declaration is what Liger's *own* wrapper makes Triton's JIT specialise: the wrapper
   (``rms_norm_forward``, ``swiglu_forward``, ...) runs on CPU tensors of the declared shapes with
   ``JITFunction.run``/``Autotuner.run`` replaced by a recorder (nothing launches, nothing compiles), the
   recorded call goes through Triton's own binder (:func:`kbuild.runtime.keys.specialization_for_call`), and
   the key the run time computes from it must equal the build's baseline key of the declared entry: the
   runtime's exact match would hit on the GPU.
2. The wheel built through kbuild's PEP 517 backend ships ``kbx_liger/_kbuild/`` with a cubin per kernel ×
   target, listed by ``kbuild inspect``. **Stand-in tuning result** (no GPU here): every kernel × target ships
   (``package_data = "all"``), and the store gets, under each tuned key, the baseline cubin with :data:`MARKER`
   appended (never loaded), so that each ships as a tuned entry; the autotuned ``dyt_fwd`` entries carry the
   autotune key Triton's ``Autotuner.run`` builds for Liger's call (``N``, then the five tensors' dtypes).

Needs ``liger-kernel==0.8.5`` installed with ``--no-deps`` (its dependencies are torch and triton).
"""

from __future__ import annotations

import importlib.metadata as _md
import json
import math
import subprocess
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
#: SMs of an H200: rms_norm's backward passes rows_per_program = ceil(rows / SMs).
H200_SMS = 132
TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
MARKER = b"kbuild-test: stand-in tuned cubin (baseline + marker), never loaded"


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
def builds() -> list[Any]:
    from kbuild.build.resolve import resolve, select_targets
    from kbuild.settings.sources import load_settings

    settings = load_settings(EXAMPLE / "pyproject.toml")
    return resolve(settings, settings.kernels, select_targets(settings, None))


def test_the_example_declares_seven_liger_kernels_in_two_dtypes_for_two_targets(builds: list[Any]) -> None:
    kernels = {b.spec.name for b in builds}
    assert len(kernels) == 14 and len(builds) == 28
    for b in builds:
        assert b.spec.module.startswith("liger_kernel.ops.")
        assert b.baseline_key.components["kernel"]["distribution"] == {"name": "liger_kernel",
                                                                       "version": LIGER_VERSION}


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_liger_own_calls_hit_the_declared_entries(builds: list[Any], dtype_name: str) -> None:
    from kbuild.runtime.keys import installed_distribution, specialization_for_call

    calls = _liger_calls(dtype_name)
    assert set(calls) == {"rms_norm_fwd", "rms_norm_bwd", "swiglu_fwd", "geglu_fwd", "layer_norm_fwd",
                          "cross_entropy", "dyt_fwd"}
    checked = 0
    for b in builds:
        base, _, dtype = b.spec.name.rpartition("_dtype_")
        if dtype != dtype_name:
            continue
        runner, args, kwargs = calls[base]
        from triton.runtime.autotuner import Autotuner

        jit = runner.fn if isinstance(runner, Autotuner) else runner
        if jit is not runner:
            # @triton.autotune: the autotuner launches its configs; check the declared default (the first).
            cfg = runner.configs[0]
            assert cfg.kwargs == {"BLOCK_N": 1024} and (cfg.num_warps, cfg.num_stages) == (4, 1)
            kwargs = {**kwargs, **cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        call = specialization_for_call(jit, *args, cc=b.target.cc, **kwargs)
        assert call.unsupported is None, (b.spec.name, call.unsupported)
        entry = {"key_components": b.baseline_key.components}
        key = call.key(ptxas_version=b.baseline_key.components["compiler"]["ptxas"], declared=b.spec.signature,
                       distribution=installed_distribution(entry))
        assert call.declaration(b.spec.signature) == {k: "".join(v.split()) for k, v in b.spec.signature.items()}, \
            b.spec.name
        assert key.hex == b.baseline_key.hex, (b.spec.name, b.target.name)
        checked += 1
    assert checked == 14


def test_rms_norm_backward_rows_per_program_specialises_as_on_an_h200() -> None:
    """On CPU Liger's backward takes one SM (rows_per_program = rows); the declaration is for an H200's 132:
    both values must specialise alike (divisible by 16), else the CPU check above would prove nothing."""
    on_cpu, on_h200 = ROWS, math.ceil(ROWS / H200_SMS)
    assert on_cpu % 16 == 0 and on_h200 % 16 == 0 and on_h200 != 1


def test_a_call_off_the_declared_shapes_misses() -> None:
    """A hidden size not declared (2048: another BLOCK_SIZE and num_warps) keys differently: Triton compiles it."""
    import torch
    from liger_kernel.ops import rms_norm

    from kbuild.build.resolve import resolve, select_targets
    from kbuild.runtime.keys import installed_distribution, specialization_for_call
    from kbuild.settings.sources import load_settings

    settings = load_settings(EXAMPLE / "pyproject.toml")
    (b,) = resolve(settings, [settings.kernel("rms_norm_fwd_dtype_fp16")], select_targets(settings, ["sm_90"]))
    x, w = torch.randn(ROWS, 2048).half(), torch.ones(2048).half()
    ((jit, args, kwargs),) = _record_calls(lambda: rms_norm.rms_norm_forward(x, w, 1e-6, 0.0, "llama", None))
    call = specialization_for_call(jit, *args, cc=90, **kwargs)
    key = call.key(ptxas_version=b.baseline_key.components["compiler"]["ptxas"], declared=b.spec.signature,
                   distribution=installed_distribution({"key_components": b.baseline_key.components}))
    assert key.hex != b.baseline_key.hex


# Run in a child process (the build's environment): compile the baselines, then store a stand-in tuning result
# (baseline cubin + marker) under every tuned key, so that every kernel × target ships.
_FILL_STORE = """
import sys
from kbuild.cache import open_store
from kbuild.settings.sources import load_settings
from kbuild.build.pipeline import run_pipeline
from kbuild.build.tuning import tuned_artefact
settings = load_settings(sys.argv[1])
n = 0
with open_store(settings) as store:
    for b in run_pipeline(settings, store):
        store.put(tuned_artefact(b, b.artefact.cubin + sys.argv[2].encode(), accepted=True, speedup=1.0,
                                 reason="stand-in tuning result (test; no GPU)"))
        n += 1
print(n)
"""


@pytest.mark.slow
def test_the_backend_wheel_ships_a_cubin_per_kernel_and_target(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "hooks"))
    try:
        from hooks_helpers import build_env, copy_project, kbuild_cli, pip_wheel
    finally:
        sys.path.pop(0)
    # tune = "auto" (the example says "off"): tuned keys exist, and with no GPU nothing is tuned for real.
    env = build_env(tmp_path / "store", XDG_CACHE_HOME=str(tmp_path / "xdg"), TRITON_CACHE_DIR=str(tmp_path / "tc"),
                    KBUILD_TUNE="auto")
    project = copy_project(EXAMPLE, tmp_path / "src" / "liger")
    proc = subprocess.run([sys.executable, "-c", _FILL_STORE, str(project / "pyproject.toml"), MARKER.decode()],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "28"
    pip_wheel(project, tmp_path / "dist", env)
    wheel = tmp_path / "dist" / "kbx_liger-0.1.0-py3-none-any.whl"
    zf = zipfile.ZipFile(wheel)
    cubins = [n for n in zf.namelist() if n.startswith("kbx_liger/_kbuild/") and n.endswith(".cubin")]
    assert len(cubins) == 28 and not any(n.startswith("liger_kernel/") for n in zf.namelist())
    index = json.loads(zf.read("kbx_liger/_kbuild/index.json"))
    assert index["package"] == "kbx_liger"
    got = {(e["kernel"], e["target"]["name"]) for e in index["entries"].values()}
    assert len(got) == 28 and {t for _, t in got} == {"sm_80", "sm_90"}
    assert all(e["function"].startswith("liger_kernel.ops.") for e in index["entries"].values())
    dyt = {e["kernel"]: e for e in index["entries"].values() if e["kernel"].startswith("dyt_fwd")}
    assert len(dyt) == 2
    for name, e in dyt.items():  # liger_dyt_fwd calls _dyt_fwd_kernel[grid](x, y, alpha, gamma, beta, HAVE_BETA, N)
        dtype = "torch.bfloat16" if "bf16" in name else "torch.float16"
        assert e["autotune"] == {"key": [4096] + [dtype] * 5}, name
    inspect = kbuild_cli("inspect", str(wheel), "--json", env=env)
    assert inspect.returncode == 0, inspect.stderr[-2000:]  # the manifest reader takes the dtype constexprs it wrote
    (data,) = json.loads(inspect.stdout)["package_data"]
    assert len(data["entries"]) == 28 and all(e["cubin_check"] == "ok" for e in data["entries"])
