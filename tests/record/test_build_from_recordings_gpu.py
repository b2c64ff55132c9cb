"""Record on the GPU → build on the CPU path → a fresh process on the GPU compiles nothing (``pytest -m gpu
tests/record/test_build_from_recordings_gpu.py``; skipped without an sm_90 GPU).

Each test records a workload through Triton's own hooks (``kbuild record --mode gpu``: measured autotune choices,
the device's SM count), builds package data from the recording alone (``[tool.kbuild] recordings``, sm_90), checks
that the run time's lookup answers every recorded call (:func:`kbuild.record.covers.recording_coverage`), then runs the
workload again in a fresh process with an empty Triton cache: ``triton.compiler.compile`` must never be entered
(every specialisation loaded from the package data), and the autotuners benchmark only the tuning keys no entry
carries (what coverage says).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpu_marks import needs_sm90
from test_record import HERE, ROOT, _liger_installed

from kbuild.cli import main
from kbuild.record import format as fmt
from kbuild.record.covers import recording_coverage
from kbuild.runtime.index import load_index

pytestmark = needs_sm90

PY = sys.executable

_CHILD = r"""
import json, sys
sys.path[:0] = {paths!r}
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
import triton, triton.compiler
from triton.runtime.autotuner import Autotuner
compiles, benches = [], []
_compile = triton.compiler.compile
def counting(src, *a, **k):
    compiles.append(getattr(getattr(src, "fn", None), "__name__", "?"))
    return _compile(src, *a, **k)
triton.compiler.compile = counting                       # what JITFunction's binder picks up
_bench = Autotuner._bench
def bench(self, *a, **k):
    benches.append(self.base_fn.__name__)
    return _bench(self, *a, **k)
Autotuner._bench = bench
import kbuild.runtime
{enable}
{run}
torch.cuda.synchronize()
print(json.dumps({{"compiles": compiles, "benches": benches,
                  "events": [e.as_dict() for e in kbuild.runtime.events()]}}))
"""


def _record(cwd: Path, out: Path, *workload: str) -> fmt.Recording:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        assert main(["record", "--mode", "gpu", "--replace", "--out", str(out), "--", PY, *workload]) == 0
    return fmt.load(str(out))


def _package_data(pyproject: Path, package_dir: Path, package: str, kbuild_env: Any, store: Path) -> Any:
    from kbuild.build.package_data import write_package_data
    from kbuild.build.plan import plan
    from kbuild.settings.sources import load_settings

    kbuild_env.set(store=str(store), targets="sm_90", tune="off")
    settings = load_settings(pyproject)
    result = plan(settings)
    assert result.recordings is not None and result.recordings.not_built == 0, result.status_lines()
    return write_package_data(settings, result.builds, package_dir, package=package)


def _fresh(tmp_path: Path, paths: list[str], enable: str, run: str) -> dict[str, Any]:
    cache = tmp_path / "fresh-triton-cache"
    code = _CHILD.format(paths=paths, enable=enable, run=run)
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={**env, "TRITON_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _unanswered_benches(rec: fmt.Recording, index: Any) -> int:
    """Benchmark launches a fresh run makes: each sm_90 tuning key no entry carries, times its configs."""
    cov = recording_coverage([index], rec)
    by = {k.function: k for k in rec.kernels.values()}
    return sum(len(next(t["configs"] for t in by[a["function"]].tunings if t["key"] == a["key"]))
               for a in cov["tuning_rows"] if not a["answered"] and a["target"] == "sm_90")


def _all_zero_jit(cov: dict[str, Any]) -> bool:
    return all(r["answered"] and r["stage"] == "zero-jit" for r in cov["rows"])


def test_the_jit_example_recorded_on_the_gpu_compiles_nothing_in_a_fresh_process(tmp_path: Path,
                                                                                   kbuild_env: Any) -> None:
    project = tmp_path / "jit-package"
    shutil.copytree(ROOT / "examples" / "jit-package", project,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    rec = _record(project, project / "kbuild-recording.json", "workload.py", "--cuda")
    data = _package_data(project / "pyproject.toml", project / "kbx_jit", "kbx_jit", kbuild_env, tmp_path / "store")
    index = load_index(data.data_dir / "index.json")
    cov = recording_coverage([index], rec)
    assert cov["specializations"] == 4 and _all_zero_jit(cov), cov["rows"]
    got = _fresh(tmp_path, [str(project)], "import kbx_jit", "import workload; workload.main('cuda')")
    assert got["compiles"] == [] and got["benches"] == []
    assert got["events"] and all(e["substituted"] for e in got["events"]), got["events"]


def test_measured_autotune_choices_answer_the_autotuner_in_a_fresh_process(tmp_path: Path, kbuild_env: Any) -> None:
    """record_kernels' ``scale`` (@triton.heuristics outside @triton.autotune) and ``shift`` (inside), and the
    persistent ``rows`` sized by the SM count."""
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(HERE / "record_kernels.py", proj)
    rec = _record(proj, proj / "rec.json", str(HERE / "workload_kernels.py"), "--cuda")
    assert all(t["choice"] is not None for k in rec.kernels.values() for t in k.tunings)
    (proj / "pyproject.toml").write_text("[project]\nname = \"rk\"\nversion = \"0\"\n[tool.kbuild]\n"
                                         "ship = \"package-data\"\npackage = \"record_kernels\"\n"
                                         "recordings = [\"rec.json\"]\n")
    data = _package_data(proj / "pyproject.toml", tmp_path / "rk", "record_kernels", kbuild_env, tmp_path / "store")
    index = load_index(data.data_dir / "index.json")
    cov = recording_coverage([index], rec)
    assert _all_zero_jit(cov), cov["rows"]
    assert any(t["answered"] for t in cov["tuning_rows"] if t["function"].endswith(":scale"))
    assert any(t["answered"] for t in cov["tuning_rows"] if t["function"].endswith(":shift"))
    enable = f"kbuild.runtime.enable('record_kernels', data_dir={str(data.data_dir)!r})"
    got = _fresh(tmp_path, [str(HERE)], enable, "import workload_kernels; workload_kernels.main(False, cuda=True)")
    assert got["compiles"] == []  # the benchmarked configurations too are loaded from the package data
    assert len(got["benches"]) == _unanswered_benches(rec, index)
    stages = {(e["function"].rpartition(":")[2], e["stage"]) for e in got["events"] if e["substituted"]}
    assert {("scale", "autotune"), ("shift", "autotune")} <= stages, got["events"]


def test_liger_wrappers_recorded_on_the_gpu_compile_and_autotune_nothing_in_a_fresh_process(
        tmp_path: Path, kbuild_env: Any) -> None:
    if not _liger_installed():
        pytest.skip("needs liger-kernel==0.8.5")
    proj = tmp_path / "proj"
    proj.mkdir()
    rec = _record(proj, proj / "rec.json", str(HERE / "workload_liger.py"), "--cuda")
    (proj / "pyproject.toml").write_text("[project]\nname = \"kbx-liger-rec\"\nversion = \"0\"\n[tool.kbuild]\n"
                                         "ship = \"package-data\"\npackage = \"kbx_liger_rec\"\n"
                                         "recordings = [\"rec.json\"]\n")
    data = _package_data(proj / "pyproject.toml", tmp_path / "kbx_liger_rec", "kbx_liger_rec", kbuild_env,
                         tmp_path / "store")
    index = load_index(data.data_dir / "index.json")
    cov = recording_coverage([index], rec)
    print(f"liger on the GPU: {cov['answered']} of {cov['specializations']} answered, "
          f"{cov['tunings_answered']} of {cov['tunings']} tunings")
    # dyt's configurations that compile to another's cubin ship once; the measured choice's is the one kept.
    assert cov["tunings_answered"] == cov["tunings"], [t for t in cov["tuning_rows"] if not t["answered"]]
    enable = f"kbuild.runtime.enable('kbx_liger_rec', data_dir={str(data.data_dir)!r})"
    got = _fresh(tmp_path, [str(HERE)], enable, "import workload_liger; workload_liger.main(['float16', "
                                                "'bfloat16'], 'cuda')")
    assert got["compiles"] == [] and got["benches"] == [], (got["compiles"], got["benches"])
