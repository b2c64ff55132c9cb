"""[tool.kbuild.cuda] through kbuild-nvcc on the real nvcc 13.x: the declared kernel found by its demangled name,
the tuned key looked up after ptxas, a stored tuned cubin carried into the object before fatbinary, the records
for the manifest, and the errors (a name not in the cubin, tune = "require" without a GPU).

No GPU here: the replacement path is tested with a STAND-IN tuned artefact, stored under the real tuned key, as
tests/hooks/test_backend_package_data.py does for Triton kernels: the untouched cubin with one control bit (yield)
flipped, other machine code of the same target; it is not a tuning result and never runs. The tuner path runs
the SASS search on the CPU cost model on the nvcc cubin (its result never ships)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nvcc_helpers import KERNEL

from kbuild.build.manifest import build_manifest, cuda_entries, manifest_bytes, read_manifest
from kbuild.cache import Artefact, open_store
from kbuild.errors import UsageError
from kbuild.nvcc.tuned import KIND_TUNED, demangle, find_symbol, matches, point_label, ptxas_variant
from kbuild.sass.elf import Cubin
from kbuild.settings.sources import settings_from_table
from kbuild.tune.measure.cubin import patch_text

ARCH90 = ["-gencode", "arch=compute_90,code=sm_90"]
ARCHS = ["-gencode", "arch=compute_80,code=sm_80", *ARCH90]

PYPROJECT = """
[project]
name = "p"
version = "0"
[tool.kbuild]
tune = "{tune}"
[[tool.kbuild.cuda.kernels]]
name = "scale"
function = "{function}"
source = "src/k.cu"
bench = "bench:scale"
"""


def project(root: Path, *, function: str = "scale", tune: str = "auto") -> Path:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "k.cu").write_text(KERNEL)
    (root / "pyproject.toml").write_text(PYPROJECT.format(function=function, tune=tune))
    return root / "src"


def args(out: str, *archs: str) -> list[str]:
    return ["-c", "k.cu", "-o", out, "-O3", *(archs or ARCHS)]


def store_of(launcher):
    return open_store(settings_from_table({"store": str(launcher.store)}, where="test"))


def ptxas_cubin(launcher, events, arch: str) -> bytes:
    """The untouched cubin ptxas wrote for ``arch``, from its step entry in the store."""
    key = next(e["key"] for e in events if e["tool"] == "ptxas" and e["arch"] == arch)
    with store_of(launcher) as store:
        return store.get(key).cubin


def _flip_yield(word: bytes) -> bytes:
    return (int.from_bytes(word, "little") ^ (1 << 109)).to_bytes(16, "little")


def test_demangled_names_match_with_or_without_namespace_and_parameters():
    sym = "_ZN47_GLOBAL__N__f69a557b_14_elementwise_cu_f9af3a6815gelu_f16_kernelEPK6__halfPS0_x"
    assert demangle(sym) == "(anonymous namespace)::gelu_f16_kernel(__half const*, __half*, long long)"
    assert matches("gelu_f16_kernel", demangle(sym))
    assert matches("(anonymous namespace)::gelu_f16_kernel(__half const*, __half*, long long)", demangle(sym))
    assert not matches("gelu", demangle(sym))
    tmpl = "(anonymous namespace)::matmul_f16_kernel<64, 64, 32, 2, 2>(__half const*, __half const*, __half*, int, int, int)"
    assert matches("matmul_f16_kernel<64,64,32,2,2>", tmpl)
    assert not matches("matmul_f16_kernel", tmpl)
    assert matches("sum_f32_kernel<256>", "void (anonymous namespace)::sum_f32_kernel<256>(float const*, float*, long long)")
    assert point_label({"maxrregcount": 64, "minnctapersm": 0}) == "maxrregcount=64"


def test_a_stored_tuned_cubin_replaces_ptxas_output_in_the_object(nvcc, launcher, tmp_path):
    src = project(tmp_path / "proj")
    records = tmp_path / "records"
    env = {"KBUILD_NVCC_RECORDS": str(records)}
    first = launcher(nvcc, *args("a.o"), cwd=src, env=env)
    assert first.returncode == 0, first.stderr
    assert first.count("tune", "untuned") == 2  # sm_80 and sm_90, no GPU here
    assert "scale (sm_90) ships untuned: no sm_90 GPU on this machine" in first.stderr
    rec = json.loads((records / "scale.sm_90.json").read_text())
    assert rec["state"] == "baseline" and rec["symbol"] == "_Z5scalePfPKfi"
    untouched = ptxas_cubin(launcher, first.events, "sm_90")
    assert rec["baseline_cubin_sha256"] == rec["cubin_sha256"] == hashlib.sha256(untouched).hexdigest()
    a_obj = (src / "a.o").read_bytes()
    assert untouched in a_obj  # the fatbin embeds ptxas's cubin as is

    # unchanged, nothing could tune it here: answered directly, with the records and the 'ships untuned' lines
    (records / "scale.sm_90.json").unlink()
    unchanged = launcher(nvcc, *args("a.o"), cwd=src, env=env)
    assert unchanged.count("nvcc", "direct-hit") == 1 and {e["tool"] for e in unchanged.events} == {"nvcc"}
    assert "scale (sm_90) ships untuned: no sm_90 GPU on this machine" in unchanged.stderr
    assert json.loads((records / "scale.sm_90.json").read_text())["state"] == "baseline"
    assert (src / "a.o").read_bytes() == a_obj

    # STAND-IN tuned artefact (not a tuning result): the yield bit of the first instruction flipped, stored under
    # the real tuned key
    stand_in, changed = patch_text(untouched, lambda i, w: _flip_yield(w) if i == 0 else w, only=rec["symbol"])
    assert changed == 1 and stand_in != untouched
    with store_of(launcher) as store:
        store.put(Artefact.create(key=rec["key"], cubin=stand_in, meta={
            "kind": KIND_TUNED, "tuned": True, "speedup": 1.25, "config": {"maxrregcount": 0, "minnctapersm": 0},
            "stand_in": "test stand-in: the untouched cubin with reuse flags cleared, not a tuning result"}))
    second = launcher(nvcc, *args("a.o"), cwd=src, env=env)
    assert second.returncode == 0, second.stderr
    assert second.count("nvcc", "direct-hit") == 0  # a tuning result arrived: the unit compiles again
    assert second.count("ptxas", "hit") == 2 and second.count("ptxas", "run") == 0
    assert second.count("tune", "tuned-hit") == 1 and second.count("tune", "untuned") == 1
    obj = (src / "a.o").read_bytes()
    assert stand_in in obj and untouched not in obj
    assert ptxas_cubin(launcher, first.events, "sm_80") in obj  # the other target as ptxas wrote it
    rec = json.loads((records / "scale.sm_90.json").read_text())
    assert rec["state"] == "tuned" and rec["speedup"] == 1.25 and rec["cubin_sha256"] != rec["baseline_cubin_sha256"]
    assert json.loads((records / "scale.sm_80.json").read_text())["state"] == "baseline"

    # the manifest lists them like Triton kernels; kbuild inspect shows them
    manifest = build_manifest([], tune="auto", cuda=cuda_entries(records))
    path = tmp_path / "kbuild.json"
    path.write_bytes(manifest_bytes(manifest))
    doc = read_manifest(path)
    assert doc["kernels"] == [] and [(e["kernel"], e["target"], e["state"]) for e in doc["cuda_kernels"]] == [
        ("scale", "sm_80", "baseline"), ("scale", "sm_90", "tuned")]
    tuned = doc["cuda_kernels"][1]
    assert tuned["speedup"] == 1.25 and tuned["key"] == rec["key"] and tuned["cubin_sha256"] == rec["cubin_sha256"]
    shown = subprocess.run([sys.executable, "-m", "kbuild", "inspect", str(path)], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "250"}, check=False)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout + shown.stderr  # the table is for people (stderr when stdout is not a terminal)
    assert "scale (CUDA)" in table and "tuned" in table and "1.25" in table
    (records / "scale.sm_80.json").write_text('{"format": "kbuild-nvcc-record/1", "kernel": "scale"}')
    with pytest.raises(UsageError, match=r"scale\.sm_80\.json: target: missing"):
        cuda_entries(records)

    # sm_90 only: tuned, so the direct mode stores the object and answers the next compile, records included
    only90 = launcher(nvcc, *args("b.o", *ARCH90), cwd=src, env=env)
    assert only90.returncode == 0 and only90.count("tune", "tuned-hit") == 1
    (records / "scale.sm_90.json").unlink()
    again = launcher(nvcc, *args("b.o", *ARCH90), cwd=src, env=env)
    assert again.count("nvcc", "direct-hit") == 1 and {e["tool"] for e in again.events} == {"nvcc"}
    assert stand_in in (src / "b.o").read_bytes()
    assert json.loads((records / "scale.sm_90.json").read_text())["state"] == "tuned"


def test_a_damaged_or_foreign_tuned_entry_is_not_shipped(nvcc, launcher, tmp_path):
    src = project(tmp_path / "proj")
    records = tmp_path / "records"
    env = {"KBUILD_NVCC_RECORDS": str(records)}
    first = launcher(nvcc, *args("a.o", *ARCH90), cwd=src, env=env)
    rec = json.loads((records / "scale.sm_90.json").read_text())
    with store_of(launcher) as store:  # not a cubin at all, marked tuned
        store.put(Artefact.create(key=rec["key"], cubin=b"\0" * 64, meta={"kind": KIND_TUNED, "tuned": True}))
    second = launcher(nvcc, *args("a.o", *ARCH90), cwd=src, env=env)
    assert second.returncode == 0, second.stderr
    assert json.loads((records / "scale.sm_90.json").read_text())["state"] == "baseline-kept"
    assert ptxas_cubin(launcher, first.events, "sm_90") in (src / "a.o").read_bytes()


def test_a_kernel_name_not_in_the_cubin_is_exit_2_naming_file_and_key(nvcc, launcher, tmp_path):
    src = project(tmp_path / "proj", function="scal")
    res = launcher(nvcc, *args("a.o", *ARCH90), cwd=src)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(tmp_path / "proj" / "pyproject.toml") in lines[0] and "cuda.kernels[0].function" in lines[0]
    assert "no __global__ function 'scal'" in lines[0] and "scale" in lines[0]
    assert not (src / "a.o").exists()  # nothing half-written


def test_tune_require_without_a_gpu_fails_naming_kernel_and_target(nvcc, launcher, tmp_path):
    src = project(tmp_path / "proj", tune="require")
    res = launcher(nvcc, *args("a.o", *ARCH90), cwd=src)
    assert res.returncode == 5, res.stderr
    assert "cuda.kernels[0] (scale) would ship untuned for sm_90" in res.stderr
    assert not (src / "a.o").exists()


def test_undeclared_projects_and_tune_off_are_untouched(nvcc, launcher, tmp_path):
    src = project(tmp_path / "proj", tune="off")
    res = launcher(nvcc, *args("a.o", *ARCH90), cwd=src)
    assert res.returncode == 0 and res.count("tune", "untuned") == 1 and 'tune = "off"' in res.stderr
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    res = launcher(nvcc, *args("b.o", *ARCH90), cwd=src)
    assert res.returncode == 0 and res.count("tune", "untuned") == 0 and "untuned" not in res.stderr


def test_the_tuner_runs_on_the_nvcc_cubin_with_the_cost_model(nvcc, launcher, tmp_path):
    """The SASS-level tuner on a cubin that nvcc's ptxas wrote (not Triton's): the cost model's result is verified
    but never accepted (only a GPU run ships a schedule)."""
    from kbuild.nvcc.tuned import tune_kernel
    from kbuild.tune.measure.backend import MODEL_BACKEND

    src = project(tmp_path / "proj")
    first = launcher(nvcc, *args("a.o", *ARCH90), cwd=src)
    cubin = ptxas_cubin(launcher, first.events, "sm_90")
    symbol = find_symbol(cubin, "scale", where="pyproject.toml", key="cuda.kernels[0].function")
    settings = settings_from_table({"budget": {"evaluations": 30, "seconds": 60}}, where="test")
    out = tune_kernel(settings.tune_request(), cubin=cubin, symbol=symbol, bench="bench:scale", python_path=[],
                      backend=None)
    assert out.backend == MODEL_BACKEND and not out.accepted and out.cubin == cubin
    level2 = out.report["level2"]
    assert level2["evaluations"] > 0 and level2["movable_instructions"] > 0
    assert out.reason.startswith("baseline kept")
    assert out.report["level2"]["kernel"] == symbol


def test_ptxas_variants_of_the_configuration_level(nvcc, launcher, tmp_path):
    from kbuild.errors import KBuildError

    src = project(tmp_path / "proj")
    ptx = tmp_path / "k.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=compute_90", "-o", str(ptx), "k.cu"], cwd=src, check=True)
    ptxas = str(Path(nvcc).parent / "ptxas")
    argv = [ptxas, "-arch=sm_90", "-m64", str(ptx), "-o", str(tmp_path / "k.cubin")]
    base = ptxas_variant(argv, {"maxrregcount": 0}, env={}, cwd=src)
    capped = ptxas_variant([*argv, "--maxrregcount=200"], {"maxrregcount": 24}, env={}, cwd=src)
    assert Cubin(base, "b").sm == Cubin(capped, "c").sm == 90
    assert not (tmp_path / "k.cubin").exists()  # variants never touch the plan's own output
    with pytest.raises(KBuildError, match="writes no -o"):
        ptxas_variant(argv[:-2], {"maxrregcount": 32}, env={}, cwd=src)
    with pytest.raises(KBuildError, match="ptxas with --maxrregcount=32 failed"):
        ptxas_variant([ptxas, "-arch=sm_90", str(tmp_path / "missing.ptx"), "-o", "x.cubin"], {"maxrregcount": 32},
                      env={}, cwd=src)


def test_a_kernel_with_an_internal_subroutine_is_read_whole_and_the_subroutine_pinned(nvcc, tmp_path):
    """examples/cuda-cmake's reduction: ptxas puts nvcc's 64-bit division routine inside the kernel's section;
    nvdisasm lists it as a function of its own. Every word is read, the routine's instructions never move."""
    import subprocess

    from kbuild.sass.disasm import disassemble
    from kbuild.sass.schedule import Schedule

    src = Path(__file__).resolve().parents[2] / "examples" / "cuda-cmake" / "src" / "reduce.cu"
    out = tmp_path / "reduce.cubin"
    subprocess.run([nvcc, "-cubin", "-O3", "-arch=sm_90", "-o", str(out), str(src)], check=True)
    cubin = out.read_bytes()
    symbol = find_symbol(cubin, "sum_f32_kernel<256>", where="p", key="k")
    elf = Cubin(cubin, "reduce")
    ins = disassemble(elf, symbol)
    assert len(ins) == elf.text(symbol).size // 16
    pinned_tail = [i.control_flow for i in ins[-10:]]
    assert all(pinned_tail)
    sched = Schedule.from_cubin(cubin, symbol)
    assert sched.n == len(ins)


@pytest.mark.parametrize("tune", ["auto", "require"])
def test_a_tuning_run_that_fails_ships_ptxas_cubin_under_auto_and_fails_under_require(nvcc, launcher, tmp_path,
                                                                                       monkeypatch, capsys, tune):
    """On the H200 the measurement worker could not load a CUDA kernel's baseline (fixed since), and the MeasureError
    stopped the whole wheel build. As for Triton kernels, a failed tuning run ships the untouched cubin with a
    warning under ``auto`` and stores nothing; under ``require`` the kernel would ship untuned, which fails."""
    from kbuild.device import probe
    from kbuild.errors import MeasureError, UntunedError
    from kbuild.nvcc.tuned import CudaTuning
    from kbuild.settings.sources import load_settings

    src = project(tmp_path / "proj", tune=tune)
    first = launcher(nvcc, *args("a.o", *ARCH90), cwd=src)
    cubin = ptxas_cubin(launcher, first.events, "sm_90")
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    settings = load_settings(tmp_path / "proj" / "pyproject.toml")
    monkeypatch.setattr(probe, "has_gpu", lambda cc: cc == 90)  # a GPU of the target, as on the H200

    def fail(*a, **k):
        raise MeasureError("the measurement worker failed while loading the baseline: fault: CudaError: "
                           "Triton Error [CUDA]: invalid device context")

    monkeypatch.setattr(CudaTuning, "_tune", fail)
    with store_of(launcher) as store:
        tuning = CudaTuning(settings, list(enumerate(settings.cuda.kernels)), store=store,
                            emit=lambda *a, **k: None)
        if tune == "require":
            with pytest.raises(UntunedError, match=r"cuda.kernels\[0\] \(scale\) would ship untuned for sm_90a? "
                                                   r"\(tuning failed: the measurement worker failed"):
                tuning.after_ptxas(path, ["ptxas"], env={}, cwd=src)
            return
        tuning.after_ptxas(path, ["ptxas"], env={}, cwd=src)
        (record,) = tuning.records
        assert record["state"] == "baseline" and record["cubin_sha256"] == hashlib.sha256(cubin).hexdigest()
        assert store.get(record["key"]) is None  # nothing stored: the next compile tries again
    assert path.read_bytes() == cubin
    assert "ships untuned: tuning failed: the measurement worker failed" in capsys.readouterr().err
