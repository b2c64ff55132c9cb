"""Two real Triton packages from the package index, adopted with no hand-written kernel declaration (issue 34):
their own tests run under ``kbuild record``, and what the recording holds, counted.

    python benchmarks/adopt_package.py wheels [--dest .whl-adopt]             # here, with the package index
    python benchmarks/adopt_package.py record conch|fla|all --mode cpu|gpu [--wheels .whl-adopt] [--label L]
    python benchmarks/adopt_package.py compare BASE.recording.json RUN.recording.json [--target sm_90]
    python benchmarks/adopt_package.py verify conch|fla --wheel WHEEL --runtime on|strict [--same-tests REPORT]
                                              [--jobs N]

The packages (``PACKAGES``), taken as they are, never patched:

* **conch** — ``conch-triton-kernels`` 1.3 (Stack AV's Triton versions of vLLM's kernels: attention, norms,
  quantisation, GEMMs, vision ops). Its tests ship in its sdist; they run on CPU tensors as they are (conch's
  platform probe says ``cpu``), so ``--mode cpu`` records them here.
* **fla** — ``fla-core`` 0.5.2 (flash-linear-attention's kernels: 429 ``@triton.jit`` functions, 181
  ``@triton.autotune``, 140 of them under a ``@triton.heuristics`` layer outside the autotuner). Its sdist ships
  no tests; ``benchmarks/adopt/fla/tests/`` holds the chosen files of its repository's ``tests/`` at tag v0.5.2
  (commit 9c8e42e7, the tag whose ``fla/`` is the sdist's, file for file), unchanged. On a machine without a GPU,
  ``fla.utils`` sets its ``device`` to ``"cuda"``, so its tests allocate CUDA tensors: ``--mode cpu`` loads the
  pytest plugin ``benchmarks/adopt/fla/plugins/kbx_fla_cpu.py`` that sets the tests' ``device`` back to ``"cpu"``
  (the package is not changed; its hardware probes keep their CPU answers, so a CPU recording of fla is a
  preview: block sizes and folded precisions differ on an H100, see ``benchmarks/adopt/README.md``).

``record`` installs the package's wheels (``--wheels``: a folder from ``wheels``, for the GPU machine, which has
no network; else they are downloaded) with ``pip --target`` into a work folder, extracts the tests, runs
``kbuild record --mode M`` over ``python -m pytest`` on the chosen test files (``--junitxml``), and writes two
files to ``--out-dir`` (default ``benchmarks/results/adopt/``): ``<pkg>_<label>.recording.json`` (the recording,
canonical) and ``<pkg>_<label>.json`` (the report: the command, tests run/passed/failed/skipped per file, and per
kernel the specialisations recorded and launched, per target, autotuned or not with its configs and key,
heuristics outside/inside the autotuner, SM-dependent values, calls that cannot be declared, and the module-level
values Triton folds into the kernel on this machine). Failing tests are expected in ``--mode cpu``: launches are
recorded instead of run, so a test that checks its outputs fails after its launches were recorded.

``verify`` runs the tests again with the wheel built from a recording (``benchmarks/adopt/<pkg>``), under
``KBUILD_RUNTIME=on`` or ``strict``, and merges the run time's coverage report of each process; ``--same-tests
REPORT`` runs only the tests the recording's run finished (its report's ``tests.ids``), so that a recording cut by
its time limit is checked on what it saw.

``compare`` says which launched specialisations of RUN (e.g. the GPU recording) BASE (e.g. what a wheel was built
from) answers, by the run time's key (:func:`kbuild.record.format.call_specialization`), and why each other one
misses: its kernel absent, another source hash (a value folded at import differs), or the fields that differ
from the nearest specialisation of the same kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ADOPT = ROOT / "benchmarks" / "adopt"
RESULTS = ROOT / "benchmarks" / "results" / "adopt"
TARGETS = "sm_80,sm_90"

#: Test dependencies of both packages, and pytest-xdist for ``--jobs`` on the GPU machine (whose image has torch,
#: triton, numpy and pytest: ../shared/tools/device-wheels' header).
COMMON_WHEELS = ["einops==0.8.2", "pytest-xdist==3.8.0", "execnet==2.1.2",
                 # kbuild's own requirements the GPU image may lack (kbuild record runs there from the checkout)
                 "rich", "markdown-it-py", "mdurl", "pygments", "diskcache"]


@dataclass(frozen=True)
class Package:
    dist: str
    version: str
    module: str
    """The import name: kernels of other modules (the test files' own) are counted apart."""
    wheels: list[str]
    """Requirements downloaded as wheels and installed with ``--no-deps`` (besides :data:`COMMON_WHEELS`)."""
    files: list[str]
    """The test files run (relative to the tests' root)."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Test files not run, and why."""
    sdist_tests: str | None = None
    """The folder of the sdist (``pip download --no-binary``) that holds the tests; None: committed under
    ``benchmarks/adopt/<name>/tests``."""
    cpu_plugin: str | None = None
    """A pytest plugin (a module of ``benchmarks/adopt/<name>/plugins/``) loaded in ``--mode cpu`` only."""

    @property
    def sdist(self) -> str:
        return f"{self.dist.replace('-', '_')}-{self.version}.tar.gz"


PACKAGES: dict[str, Package] = {
    "conch": Package(
        dist="conch-triton-kernels", version="1.3", module="conch", wheels=["conch-triton-kernels==1.3"], sdist_tests="tests",
        files=["tests/bev_pool_test.py", "tests/copy_blocks_test.py", "tests/dequantize_blockwise_test.py",
               "tests/fp8_quant_kernels_test.py", "tests/gelu_tanh_and_mul_test.py", "tests/gemma_rms_norm_test.py",
               "tests/int8_quant_kernels_test.py", "tests/mixed_precision_gemm_test.py", "tests/nms_test.py",
               "tests/quantize_blockwise_test.py", "tests/rms_norm_test.py", "tests/rotary_embedding_test.py",
               "tests/scaled_gemm_test.py", "tests/silu_and_mul_test.py", "tests/voxelization_test.py"],
        left_out={
            "tests/paged_attention_test.py": "14,202 parametrised tests (9.5 GB resident and killed at 83% of a "
                                             "CPU run); more than the GPU step's 5 minutes",
            "tests/varlen_attention_test.py": "2,498 parametrised tests with a CPU reference attention; more than the "
                                              "GPU step's 5 minutes",
            "tests/reshape_and_cache_test.py": "648 tests whose CPU reference over 1,000-1,500-block caches did not "
                                               "finish in 15 minutes on 2 cores",
        }),
    "fla": Package(
        dist="fla-core", version="0.5.2", module="fla", wheels=["fla-core==0.5.2"], cpu_plugin="kbx_fla_cpu",
        files=["tests/modules/test_l2norm.py", "tests/modules/test_token_shift.py", "tests/ops/utils/test_cumsum.py",
               "tests/ops/test_solve_tril.py", "tests/ops/test_simple_gla.py", "tests/ops/test_gla.py"],
        left_out={"the other 114 files of tests/": "not chosen: the GPU step has about 5 minutes for both packages, "
                                                    "and each autotuned kernel compiles every configuration there"}),
}


# -- wheels -------------------------------------------------------------------------------------------------------

def pip_download(args: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), *args]
    subprocess.run(cmd, check=True)


def download_wheels(dest: Path, names: list[str]) -> None:
    """The wheels (any platform, CPython 3.12 as on the GPU machine) and sdists the packages' tests need."""
    dest.mkdir(parents=True, exist_ok=True)
    reqs = [*COMMON_WHEELS, *(r for n in names for r in PACKAGES[n].wheels)]
    pip_download(["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--platform", "any",
                  *reqs], dest)
    for n in names:
        pkg = PACKAGES[n]
        if pkg.sdist_tests is not None and not (dest / pkg.sdist).is_file():
            pip_download(["--no-binary", ":all:", f"{pkg.dist}=={pkg.version}"], dest)


def install(wheels: Path, site: Path, names: list[str], extra: list[Path]) -> list[str]:
    prefixes = [r.split("==")[0].replace("-", "_").lower() for r in
                [*COMMON_WHEELS, *(r for n in names for r in PACKAGES[n].wheels)]]
    chosen = sorted(w for w in wheels.glob("*.whl") if w.name.split("-")[0].lower() in prefixes) + extra
    if site.exists():
        shutil.rmtree(site)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(site), *map(str, chosen)], check=True)
    return [w.name for w in chosen]


def extract_tests(pkg: Package, name: str, wheels: Path, root: Path) -> str:
    """The tests under ``root/tests``; returns where they came from."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    if pkg.sdist_tests is None:
        shutil.copytree(ADOPT / name / "tests", root / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        return f"benchmarks/adopt/{name}/tests (the repository's tests/ at the release tag)"
    prefix = pkg.sdist.removesuffix(".tar.gz") + "/" + pkg.sdist_tests + "/"
    with tarfile.open(wheels / pkg.sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix) and m.isfile()]
        for m in members:
            m.name = "tests/" + m.name[len(prefix):]
        tf.extractall(root, members=members, filter="data")
    return f"{pkg.sdist}:{pkg.sdist_tests}/"


# -- record ---------------------------------------------------------------------------------------------------------

def junit_counts(path: Path, root: Path | None = None) -> dict[str, Any]:
    """Tests run (not skipped), passed, failed, errors and skipped, per test file (pytest's ``classname`` is the
    module's dotted path, then the class if any: the longest prefix that is a file under ``root``), and ``ids``:
    the node id of each test that finished (``verify --same-tests`` runs exactly those again)."""
    per_file: dict[str, dict[str, int]] = {}
    ids: set[str] = set()
    if not path.is_file():
        return {"error": "no junit report (pytest did not finish)"}
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("classname"):  # pytest's entry for a run stopped by SIGINT (not a test)
            continue
        parts = str(case.get("classname")).split(".")
        f = "/".join(parts) + ".py"
        for n in range(len(parts), 0, -1):
            if root is not None and (root / ("/".join(parts[:n]) + ".py")).is_file():
                f = "/".join(parts[:n]) + ".py"
                break
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "errors", "skipped": "skipped"}[child.tag]
        counts = per_file.setdefault(f, {"run": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0})
        counts[outcome] += 1
        counts["run"] += outcome != "skipped"
        inner = parts[len(f[:-3].split("/")):]  # a test class's name, if any
        ids.add("::".join([f, *inner, str(case.get("name"))]))
    total = {k: sum(c[k] for c in per_file.values()) for k in ("run", "passed", "failed", "errors", "skipped")}
    return {"total": total, "files": dict(sorted(per_file.items())), "ids": sorted(ids)}


#: Run in the recorded package's environment: the module-level values Triton folds into each recorded kernel
#: (and its callees) on this machine, with kbuild's own walk (kbuild.compile.triton_aot.folded_globals).
FOLDED_CHILD = r"""
import importlib, json, sys
from kbuild.compile.triton_aot import folded_globals, source_hash
out = {}
for function in json.loads(sys.argv[1]):
    module, _, qualname = function.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        while not hasattr(obj, "cache_key"):
            obj = obj.fn
        out[function] = {"source_hash": source_hash(obj),
                         "folded": sorted(f"{g.module}:{g.name} = {g.text}" for g in folded_globals(obj))}
    except Exception as exc:
        out[function] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def folded_values(functions: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", FOLDED_CHILD, json.dumps(functions)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {f: {"error": proc.stderr[-500:]} for f in functions}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def analyse(recording: dict[str, Any], package_module: str, folded: dict[str, Any]) -> dict[str, Any]:
    kernels = []
    for k in recording["kernels"]:
        specs = k["specializations"]
        per_target: dict[str, dict[str, int]] = {}
        for s in specs:
            t = per_target.setdefault(s["target"], {"specializations": 0, "launched": 0, "unsupported": 0})
            t["specializations"] += 1
            t["launched"] += s["calls"] > 0
            t["unsupported"] += s["unsupported"] is not None
        at = k["autotune"]
        sm_dep = sorted({name for s in specs for name in s.get("sm_dependent", {})})
        kernels.append({
            "function": k["function"],
            "from": "package" if k["module"].split(".")[0] == package_module else "test file",
            "source_hash": k["source_hash"],
            "autotune": None if at is None else {"configs": len(at["configs"]), "key": at["key"], "prunes": at["prunes"],
                                                 "keys_seen": len({json.dumps(t["key"]) for t in k["tunings"]})},
            "heuristics": k["heuristics"],
            "per_target": per_target,
            "calls": sum(s["calls"] for s in specs),
            "sm_dependent": sm_dep,
            "unsupported_reasons": sorted({s["unsupported"] for s in specs if s["unsupported"]}),
            "folded_here": folded.get(k["function"], {}).get("folded"),
            "import_hash_matches": (folded.get(k["function"], {}).get("source_hash") == k["source_hash"]
                                    if "source_hash" in folded.get(k["function"], {}) else None),
        })
    targets = sorted({t for k in kernels for t in k["per_target"]})
    ours = [k for k in kernels if k["from"] == "package"]
    totals = {t: {"kernels": sum(t in k["per_target"] for k in ours),
                  "specializations": sum(k["per_target"].get(t, {}).get("specializations", 0) for k in ours),
                  "launched": sum(k["per_target"].get(t, {}).get("launched", 0) for k in ours),
                  "unsupported": sum(k["per_target"].get(t, {}).get("unsupported", 0) for k in ours),
                  "autotuned_kernels": sum(k["autotune"] is not None and t in k["per_target"] for k in ours),
                  "autotuned_specializations": sum(k["per_target"].get(t, {}).get("specializations", 0)
                                                   for k in ours if k["autotune"] is not None),
                  "heuristics_outside_kernels": sum("outside" in k["heuristics"].values() for k in ours),
                  "sm_dependent_kernels": sum(bool(k["sm_dependent"]) for k in ours)}
              for t in targets}
    return {"package_kernels_per_target": totals,
            "test_file_kernels": [k["function"] for k in kernels if k["from"] != "package"],
            "kernels": kernels}


@dataclass
class Setup:
    """A package installed into a work folder, its tests extracted, and the environment its tests run in."""

    work: Path
    site: Path
    root: Path
    env: dict[str, str]
    installed: list[str]
    tests_from: str


def setup(name: str, wheels: Path | None, work: Path, *, extra_wheels: list[Path] = (), plugin_dirs: list[Path] = (),
          fresh_triton_cache: bool = False) -> Setup:
    pkg = PACKAGES[name]
    work.mkdir(parents=True, exist_ok=True)
    if wheels is None:
        wheels = work / "wheels"
        download_wheels(wheels, [name])
    site, root = work / "site", work / "tests-root"
    installed = install(wheels, site, [name], extra=list(extra_wheels))
    tests_from = extract_tests(pkg, name, wheels, root)
    (root / "pytest.ini").write_text("[pytest]\n")  # rootdir here; none of the package's own pytest options
    path = [str(site), *map(str, plugin_dirs), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    cache = work / "triton-cache"
    if fresh_triton_cache and cache.exists():
        shutil.rmtree(cache)
    env["TRITON_CACHE_DIR"] = str(cache)  # an empty cache: every compile and autotuning happens in this run
    return Setup(work, site, root, env, installed, tests_from)


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                found.append(int(entry.name))
    return found


def run_logged(cmd: list[str], s: Setup, timeout: float) -> tuple[int | str, str, float]:
    """Run ``cmd`` in the tests' root, its stderr into ``pytest.log``: (status, stdout, seconds). Past ``timeout``
    every process of its group but ``cmd``'s own gets SIGINT (pytest stops after the running test and writes its
    report, the recorder writes at exit, and ``kbuild record``, not interrupted, merges what was recorded), then
    the whole group SIGKILL 60 s later."""
    log = s.work / "pytest.log"
    start = time.monotonic()
    with log.open("w") as errf:
        proc = subprocess.Popen(cmd, env=s.env, cwd=s.root, stdout=subprocess.PIPE, stderr=errf, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            status: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            for pid in group_members(proc.pid):
                if pid != proc.pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGINT)
            try:
                out, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            status = f"stopped after {timeout:.0f} s (exit {proc.returncode})"
    return status, out, time.monotonic() - start


def pytest_command(pkg: Package, junit: Path, plugins: list[str], jobs: int) -> list[str]:
    junit.unlink(missing_ok=True)
    return [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "--junitxml", str(junit),
            *(a for p in plugins for a in ("-p", p)), *(["-n", str(jobs)] if jobs > 0 else []), *pkg.files]


def printable(cmd: list[str], work: Path) -> str:
    """``cmd`` as a person would type it: ``python`` for this interpreter, ``kbuild`` for ``python -m kbuild``,
    paths under the work folder as ``WORK/...`` and the checkout's relative."""
    words = ["python" if c == sys.executable else str(c) for c in cmd]
    if words[:3] == ["python", "-m", "kbuild"]:
        words = ["kbuild", *words[3:]]
    return " ".join(words).replace(str(work), "WORK").replace(str(ROOT) + "/", "")


def base_report(name: str, label: str, s: Setup, cmd: list[str], status: Any, seconds: float) -> dict[str, Any]:
    pkg = PACKAGES[name]
    return {"label": label, "package": {"name": pkg.dist, "version": pkg.version},
            "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
            "command": " ".join(["python", "benchmarks/adopt_package.py", *sys.argv[1:]]),
            "run_command": printable(cmd, s.work),
            "wheels_installed": s.installed, "tests_from": s.tests_from, "test_files": pkg.files,
            "left_out": pkg.left_out, "seconds": round(seconds, 1), "status": status,
            "tests": junit_counts(s.work / "junit.xml", s.root)}


def keep_autotune_cache(cache: Path, dest: Path) -> int:
    """The ``*.autotune.json`` files Triton's ``cache_results`` wrote (fla's autotuners set it) into ``dest``, laid
    out as in ``TRITON_CACHE_DIR`` (the build's ``autotune_caches`` takes such a folder): the choices measured on
    this GPU. Returns how many."""
    files = sorted(cache.glob("*/*.autotune.json")) if cache.is_dir() else []
    if dest.exists():
        shutil.rmtree(dest)
    for f in files:
        (dest / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / f.parent.name / f.name)
    return len(files)


def record(name: str, mode: str, wheels: Path | None, work: Path, out_dir: Path, label: str, jobs: int,
           timeout: float) -> Path:
    pkg = PACKAGES[name]
    cpu_plugin = mode == "cpu" and pkg.cpu_plugin is not None
    s = setup(name, wheels, work, plugin_dirs=[ADOPT / name / "plugins"] if cpu_plugin else [],
              fresh_triton_cache=True)
    s.env["KBUILD_RUNTIME"] = "off"  # Triton's own compiles and autotuning, as benchmarks/gpu_record_liger.sh records
    out_dir.mkdir(parents=True, exist_ok=True)
    rec_path = out_dir / f"{name}_{label}.recording.json"
    pytest_cmd = pytest_command(pkg, work / "junit.xml", [pkg.cpu_plugin] if cpu_plugin and pkg.cpu_plugin else [],
                                jobs)
    # on a GPU, one call's integer and bool tensors per specialisation are kept too (FILE.captures/, at most 8 MiB a
    # call), so that issue 35's tuner can replay the inputs it cannot generate (conch's int8 GEMM, NMS masks)
    capture = ["--capture", "1", "--capture-mib", "8"] if mode == "gpu" else []
    cmd = [sys.executable, "-m", "kbuild", "record", "--mode", mode, *(["--target", TARGETS] if mode == "cpu" else []),
           *capture, "--replace", "-o", str(rec_path), "--json", "--", *pytest_cmd]
    print(f"[{name}] {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    status, summary_text, seconds = run_logged(cmd, s, timeout)
    try:
        summary = json.loads(summary_text)
    except json.JSONDecodeError:
        summary = {"error": "no JSON summary from kbuild record",
                   "log_tail": (work / "pytest.log").read_text()[-2000:]}
    autotune_files = keep_autotune_cache(Path(s.env["TRITON_CACHE_DIR"]), out_dir / f"{name}_{label}.triton-autotune")
    recording = json.loads(rec_path.read_text()) if rec_path.is_file() else {"kernels": []}
    functions = sorted({k["function"] for k in recording["kernels"]})
    folded = folded_values(functions, {**s.env, "PYTHONPATH": os.pathsep.join([str(s.root), s.env["PYTHONPATH"]])},
                           s.root)
    report = {**base_report(name, label, s, cmd, status, seconds), "mode": mode,
              "triton_autotune_cache_files": autotune_files,
              "kbuild_record": {k: summary.get(k) for k in ("kernels", "specializations", "calls", "run")}
              if "error" not in summary else summary,
              **analyse(recording, pkg.module, folded)}
    report_path = out_dir / f"{name}_{label}.json"
    report_path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"[{name}] {seconds:.0f} s, status {status}; tests {report['tests'].get('total')}; "
          f"per target {json.dumps(report['package_kernels_per_target'])}; -> {report_path}", file=sys.stderr)
    return report_path


#: A pytest plugin ``verify --same-tests`` writes beside the tests: only the node ids listed in ``$KBX_SAME_TESTS``
#: (one a line) run; the others are deselected (in each pytest-xdist worker too: ``-p`` reaches them).
SAME_TESTS_PLUGIN = '''"""Written by benchmarks/adopt_package.py: run only the tests $KBX_SAME_TESTS lists."""
import os


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("KBX_SAME_TESTS")
    if not path:
        return
    with open(path) as f:
        wanted = {line.strip() for line in f if line.strip()}
    dropped = [i for i in items if i.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i.nodeid in wanted]
'''


def same_test_ids(report_path: Path) -> list[str]:
    """The node ids of the tests a ``record`` report's run finished (``tests.ids``)."""
    doc = json.loads(report_path.read_text())
    ids = (doc.get("tests") or {}).get("ids") if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise SystemExit(f"{report_path}: tests.ids: expected the node ids of the tests its run finished (a report "
                         "of `record` since they are kept)")
    return ids


def verify(name: str, wheel: Path, wheels: Path | None, work: Path, out_dir: Path, label: str, runtime: str,
           timeout: float, *, same_tests: Path | None = None, jobs: int = 0) -> Path:
    """The package's tests again with the adoption wheel (``benchmarks/adopt/<name>`` built from a recording)
    installed and imported first (``-p kbx_adopt_<name>``: it enables kbuild.runtime for the kernels it ships),
    ``KBUILD_RUNTIME=runtime`` (``on`` or ``strict``), an empty Triton cache, and the run time's coverage report of
    each process (``KBUILD_RUNTIME_REPORT=DIR/{pid}.json``, ``jobs`` pytest-xdist workers) merged into one
    (:func:`kbuild.runtime.coverage.merge`, what ``kbuild coverage`` does) in ``out_dir``.

    ``same_tests``: a ``record`` report; only the tests its run finished run again (a recording cut by its time
    limit is then checked on what it saw, not on tests it never reached)."""
    from kbuild.runtime.coverage import merge

    pkg = PACKAGES[name]
    plugins, plugin_dirs, ids = [f"kbx_adopt_{name}"], [], None
    if same_tests is not None:
        ids = same_test_ids(same_tests)
        pdir = work / "same-tests"
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / "kbx_same_tests.py").write_text(SAME_TESTS_PLUGIN)
        (pdir / "ids.txt").write_text("\n".join(ids) + "\n")
        plugins.append("kbx_same_tests")
        plugin_dirs.append(pdir)
    s = setup(name, wheels, work, extra_wheels=[wheel], plugin_dirs=plugin_dirs, fresh_triton_cache=True)
    if ids is not None:
        s.env["KBX_SAME_TESTS"] = str(work / "same-tests" / "ids.txt")
    out_dir.mkdir(parents=True, exist_ok=True)
    coverage = out_dir / f"{name}_{label}.coverage.json"
    coverage.unlink(missing_ok=True)
    per_process = work / "coverage"
    shutil.rmtree(per_process, ignore_errors=True)
    per_process.mkdir(parents=True)
    s.env.update(KBUILD_RUNTIME=runtime, KBUILD_RUNTIME_REPORT=str(per_process / "{pid}.json"))
    cmd = pytest_command(pkg, work / "junit.xml", plugins, jobs)
    print(f"[{name}] KBUILD_RUNTIME={runtime} {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    status, _, seconds = run_logged(cmd, s, timeout)
    docs = [json.loads(p.read_text()) for p in sorted(per_process.glob("*.json"))]
    doc = merge(docs) if docs else None
    if doc is not None:
        coverage.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    log = (work / "pytest.log").read_text()
    report = {**base_report(name, label, s, cmd, status, seconds), "runtime": runtime, "wheel": wheel.name,
              "same_tests": {"from": same_tests.name, "ids": len(ids)} if same_tests is not None and ids else None,
              "coverage_processes": len(docs), "runtime_enabled": bool(doc and f"kbx_adopt_{name}" in doc["packages"]),
              "coverage_file": coverage.name if doc else None,
              "coverage_totals": doc and doc.get("totals"), "coverage_errors_in_log": log.count("CoverageError")}
    report_path = out_dir / f"{name}_{label}.json"
    report_path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"[{name}] {seconds:.0f} s, status {status}; tests {report['tests'].get('total')}; coverage "
          f"{json.dumps(report['coverage_totals'])} -> {report_path}", file=sys.stderr)
    if not report["runtime_enabled"]:  # nothing was answered or checked: say so, whatever the tests did
        print(f"[{name}] ERROR: kbuild.runtime was not enabled for kbx_adopt_{name} in any process (no coverage "
              "report names it): this run measured nothing", file=sys.stderr)
    return report_path


# -- compare --------------------------------------------------------------------------------------------------------

def compare(base_path: Path, run_path: Path, target: str) -> dict[str, Any]:
    """Which launched specialisations of ``run`` for ``target`` ``base`` holds (same run time key), and why not."""
    from kbuild.record.format import call_specialization, load

    base, run = load(str(base_path)), load(str(run_path))

    def key(rec: Any, k: Any, s: Any) -> str:
        return str(call_specialization(rec, k, s).key(ptxas_version="-", distribution=k.distribution))

    have: set[str] = set()
    by_function: dict[str, list[tuple[Any, Any]]] = {}
    for k in base.kernels.values():
        for s in k.specializations.values():
            if s.target == target and s.unsupported is None:
                have.add(key(base, k, s))
                by_function.setdefault(k.function, []).append((k, s))
    launched, answered, misses = 0, 0, []
    for k in run.kernels.values():
        for s in k.specializations.values():
            if s.target != target or s.calls == 0:
                continue
            launched += 1
            if s.unsupported is None and key(run, k, s) in have:
                answered += 1
                continue
            near = by_function.get(k.function, [])
            if s.unsupported is not None:
                why = f"cannot be declared: {s.unsupported}"
            elif not near:
                why = "kernel not in the base recording"
            elif all(bk.source_hash != k.source_hash for bk, _ in near):
                why = "another source hash (a module-level value folded at import differs)"
            else:
                fields = []
                for _bk, bs in near:
                    diff = [f for f in ("signature", "constexprs", "options") if getattr(bs, f) != getattr(s, f)]
                    diff += [f"{f}.{n}" for f in ("signature", "constexprs") for n in sorted(
                        set(getattr(bs, f)) | set(getattr(s, f))) if getattr(bs, f).get(n) != getattr(s, f).get(n)]
                    if base.compiler_options[bs.compiler_options] != run.compiler_options[s.compiler_options]:
                        diff.append("compiler_options")
                    fields.append(diff)
                why = "nearest differs in " + ", ".join(min(fields, key=len))
            misses.append({"function": k.function, "id": s.id, "calls": s.calls, "why": why})
    return {"target": target, "launched": launched, "answered": answered,
            "share": round(answered / launched, 4) if launched else None, "misses": misses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("wheels", help="download the wheels and sdists both packages' tests need")
    w.add_argument("--dest", type=Path, default=ROOT / ".whl-adopt")
    r = sub.add_parser("record", help="run a package's tests under kbuild record and report")
    r.add_argument("package", choices=[*PACKAGES, "all"])
    r.add_argument("--mode", choices=["cpu", "gpu"], default="cpu")
    r.add_argument("--wheels", type=Path, default=None, help="a folder from `wheels` (default: download)")
    r.add_argument("--work", type=Path, default=Path("/tmp/kbx-adopt"))
    r.add_argument("--out-dir", type=Path, default=RESULTS)
    r.add_argument("--label", default=None, help="file name label (default: the mode)")
    r.add_argument("--jobs", type=int, default=0, help="pytest-xdist workers (0: none)")
    r.add_argument("--timeout", type=float, default=1800)
    v = sub.add_parser("verify", help="the tests again with the adoption wheel, KBUILD_RUNTIME on or strict")
    v.add_argument("package", choices=list(PACKAGES))
    v.add_argument("--wheel", type=Path, required=True, help="the wheel built from benchmarks/adopt/PACKAGE")
    v.add_argument("--wheels", type=Path, default=None)
    v.add_argument("--runtime", choices=["on", "strict"], default="on")
    v.add_argument("--work", type=Path, default=Path("/tmp/kbx-adopt-verify"))
    v.add_argument("--out-dir", type=Path, default=RESULTS)
    v.add_argument("--label", default=None, help="file name label (default: verify-RUNTIME)")
    v.add_argument("--timeout", type=float, default=1800)
    v.add_argument("--same-tests", type=Path, default=None, metavar="REPORT",
                   help="a `record` report: run only the tests its run finished")
    v.add_argument("--jobs", type=int, default=0, help="pytest-xdist workers (0: none)")
    c = sub.add_parser("compare", help="which launched specialisations of RUN a BASE recording holds")
    c.add_argument("base", type=Path)
    c.add_argument("run", type=Path)
    c.add_argument("--target", default="sm_90")
    c.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.verb == "wheels":
        download_wheels(args.dest, list(PACKAGES))
        for p in sorted(args.dest.iterdir()):
            print(f"{p.stat().st_size:>10}  {p.name}")
        print(f"{sum(p.stat().st_size for p in args.dest.iterdir()) / 1e6:.1f} MB in {args.dest}")
    elif args.verb == "record":
        for name in PACKAGES if args.package == "all" else [args.package]:
            record(name, args.mode, args.wheels, args.work / name, args.out_dir, args.label or args.mode, args.jobs,
                   args.timeout)
    elif args.verb == "verify":
        verify(args.package, args.wheel, args.wheels, args.work / args.package, args.out_dir,
               args.label or f"verify-{args.runtime}", args.runtime, args.timeout, same_tests=args.same_tests,
               jobs=args.jobs)
    else:
        result = compare(args.base, args.run, args.target)
        text = json.dumps(result, indent=1) + "\n"
        if args.out:
            args.out.write_text(text)
        print(text if len(text) < 4000 else json.dumps({k: v for k, v in result.items() if k != "misses"}))


if __name__ == "__main__":
    main()
