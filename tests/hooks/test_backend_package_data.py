"""examples/jit-package built through kbuild's PEP 517 backend (issue 16, part 2): ``ship = "package-data"``
puts ``kbx_jit/_kbuild/`` (index + cubins + enabling module) and ``.dist-info/kbuild.json`` into the wheel,
``kbuild inspect`` reads them, a rebuild elsewhere is byte-identical, plain setuptools with kbuild's entry
point plugin gives the same wheel, and the project's source tree is left as it was.

No GPU here, so nothing is tuned for real. **Stand-in tuning result:** the store is given, under the tuned keys
of two kernel × target, the artefact :func:`kbuild.build.tuning.tuned_artefact` makes (what the tuner stores),
whose "tuned" cubin is the baseline cubin with :data:`MARKER` appended (a distinct digest; never loaded) and a
made-up speedup of ×1.25. The build cannot tell it from a real tuning result, which is the point.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import ROOT, build_env, copy_project, kbuild_cli, pip_wheel, set_backend
from hostile_helpers import assert_clean_error

pytestmark = pytest.mark.slow

JIT_EXAMPLE = ROOT / "examples" / "jit-package"
MARKER = b"kbuild-test: stand-in tuned cubin (baseline + marker), never loaded"
STAND_IN_TUNED = {("softmax", "sm_90"), ("matmul_leaky_relu", "sm_80")}
WHEEL = "kbx_jit-0.1.0-py3-none-any.whl"

# Run in a child process (the build's environment, no kbx_jit import in the test process): compile the
# baselines into the store, then store a stand-in tuning result under the tuned key of each STAND_IN_TUNED.
_FILL_STORE = """
import hashlib, json, sys
from kbuild.cache import open_store
from kbuild.settings.sources import load_settings
from kbuild.build.pipeline import run_pipeline
from kbuild.build.tuning import tuned_artefact

wanted = {tuple(x) for x in json.loads(sys.argv[2])}
settings = load_settings(sys.argv[1])
out = []
with open_store(settings) as store:
    for b in run_pipeline(settings, store):
        if (b.spec.name, b.target.name) in wanted:
            art = tuned_artefact(b, b.artefact.cubin + sys.argv[3].encode(), accepted=True, speedup=1.25,
                                 reason="stand-in tuning result (test; no GPU)")
            store.put(art)
            out.append({"kernel": b.spec.name, "target": b.target.name, "baseline_key": b.baseline_key.hex,
                        "tuned_key": b.tuned_key.hex, "cubin_sha256": hashlib.sha256(art.cubin).hexdigest(),
                        "baseline_sha256": b.artefact.cubin_sha256})
print(json.dumps(out))
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _git_project(dest: Path) -> Path:
    """A copy of the example as its own git repository; ``.gitignore`` names setuptools' own outputs (its build
    directory and egg-info), which setuptools writes into any project it builds, with or without kbuild."""
    project = copy_project(JIT_EXAMPLE, dest)
    (project / ".gitignore").write_text("/build/\n*.egg-info/\n")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "example")
    return project


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("jit-backend")
    store = base / "store"
    env = build_env(store, XDG_CACHE_HOME=str(base / "xdg"), TRITON_CACHE_DIR=str(base / "triton"))
    example_status = _git(ROOT, "status", "--porcelain", "--", str(JIT_EXAMPLE))
    project = _git_project(base / "src" / "jit-package")
    proc = subprocess.run([sys.executable, "-c", _FILL_STORE, str(project / "pyproject.toml"),
                           json.dumps(sorted(STAND_IN_TUNED)), MARKER.decode()],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    tuned = json.loads(proc.stdout)
    assert {(t["kernel"], t["target"]) for t in tuned} == STAND_IN_TUNED
    before = _git(project, "status", "--porcelain", "--untracked-files=all", "--ignored")
    build = pip_wheel(project, base / "dist", env)
    return {"base": base, "store": store, "env": env, "project": project, "tuned": tuned,
            "wheel": base / "dist" / WHEEL, "log": build.stdout + build.stderr, "example_status": example_status,
            "status_before": before}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_the_wheel_ships_the_index_the_cubins_and_the_manifest(built: dict[str, Any]):
    from kbuild.build.package_data import render_init

    zf = zipfile.ZipFile(built["wheel"])
    names = set(zf.namelist())
    tuned = {(t["kernel"], t["target"]): t for t in built["tuned"]}
    manifest = json.loads(zf.read("kbx_jit-0.1.0.dist-info/kbuild.json"))
    states = {(e["kernel"], e["target"]): (e["state"], e["cubin_sha256"]) for e in manifest["kernels"]}
    assert len(states) == 8  # 2 declared kernels and 2 more specialisations recorded, × 2 targets
    for kt, (state, sha) in states.items():
        assert state == ("tuned" if kt in STAND_IN_TUNED else "baseline")
        if kt in STAND_IN_TUNED:
            assert sha == tuned[kt]["cubin_sha256"]
    # package_data = "all" (the default): every kernel × target ships, the stand-in tuned cubin where there is
    # one, else the baseline (the zero-JIT loader serves it instead of compiling on the first call).
    expected = {"kbx_jit/_kbuild/index.json", "kbx_jit/_kbuild/__init__.py"} | {
        f"kbx_jit/_kbuild/{sha}.cubin" for _, sha in states.values()}
    assert {n for n in names if n.startswith("kbx_jit/_kbuild/")} == expected
    for t in built["tuned"]:
        cubin = zf.read(f"kbx_jit/_kbuild/{t['cubin_sha256']}.cubin")
        assert hashlib.sha256(cubin).hexdigest() == t["cubin_sha256"] != t["baseline_sha256"]
        assert cubin.endswith(MARKER)
    assert zf.read("kbx_jit/_kbuild/__init__.py") == render_init("kbx_jit")

    index = json.loads(zf.read("kbx_jit/_kbuild/index.json"))
    assert index["package"] == "kbx_jit"
    entries = index["entries"]
    # Keyed by the baseline key (what the run time recomputes); a tuned entry names the stand-in tuned artefact.
    assert {(e["kernel"], e["target"]["name"]) for e in entries.values()} == set(states)
    for key, e in entries.items():
        kt = (e["kernel"], e["target"]["name"])
        assert e["state"] == states[kt][0] and e["cubin_sha256"] == states[kt][1]
        if kt in STAND_IN_TUNED:
            t = tuned[kt]
            assert key == t["baseline_key"] and e["artefact_key"] == t["tuned_key"]
            assert e["tuned"] is True and e["speedup"] == 1.25
        else:
            assert key == e["artefact_key"] and e["tuned"] is False and e["speedup"] is None
            assert not zf.read(f"kbx_jit/_kbuild/{e['cubin']}").endswith(MARKER)

    # RECORD covers the package data with the right hashes (pip checks them on install).
    record = {line.split(",")[0]: line.split(",")[1] for line in zf.read("kbx_jit-0.1.0.dist-info/RECORD")
              .decode().splitlines() if line}
    for name in expected | {"kbx_jit-0.1.0.dist-info/kbuild.json"}:
        assert record[name] == _record_hash(zf.read(name)), name
    assert "kbuild: package data for kbx_jit: 8 kernel × target (2 tuned)" in built["log"]


def test_the_wheel_answers_every_call_of_the_committed_recording(built: dict[str, Any]):
    """``recordings = ["kbuild-recording.json"]`` (what workload.py launches): each recorded specialisation has an
    entry the run time's own lookup finds, with the Triton metadata the zero-JIT loader needs; the two the
    hand-written declarations describe too are built once, under the hand-written names."""
    from kbuild.commands.inspect import wheel_indexes
    from kbuild.record.covers import recording_coverage
    from kbuild.record.format import load

    recording = load(str(JIT_EXAMPLE / "kbuild-recording.json"))
    (index,) = wheel_indexes(built["wheel"])
    cov = recording_coverage([index], recording)
    assert (cov["specializations"], cov["answered"], cov["tunings"]) == (8, 8, 0), cov["rows"]
    assert all(r["stage"] == "zero-jit" for r in cov["rows"])
    names = sorted({index.entries[r["entry"]]["kernel"] for r in cov["rows"]})
    assert len(names) == 4 and {"softmax", "matmul_leaky_relu"} <= set(names)  # the hand-written entries answer
    manifest = json.loads(zipfile.ZipFile(built["wheel"]).read("kbx_jit-0.1.0.dist-info/kbuild.json"))
    recorded = [e for e in manifest["kernels"] if "recorded" in e]
    assert len(recorded) == 4 and all(e["recorded"] == {"recordings": ["kbuild-recording.json"],
                                                        "imported_as_recorded": False, "autotune": None}
                                      for e in recorded)
    assert ("kbuild: recordings kbuild-recording.json: 8 specialisation(s) → 4 declaration(s); 4 kernel × target "
            "built from them, 4 declared by hand too, 0 not built") in built["log"]
    assert ("kbuild: recordings: kbuild-recording.json: the package data answers 8 of 8 recorded specialisation(s) "
            "(8 of 8 calls) without compiling") in built["log"]


def test_the_source_tree_is_left_clean(built: dict[str, Any]):
    project: Path = built["project"]
    assert not (project / "kbx_jit" / "_kbuild").exists()
    assert _git(project, "status", "--porcelain", "--untracked-files=all") == ""
    # Beyond setuptools' own build directory and egg-info, nothing new, even among ignored files.
    after = _git(project, "status", "--porcelain", "--untracked-files=all", "--ignored")
    new = set(after.splitlines()) - set(built["status_before"].splitlines())
    assert new and all(line.startswith(("!! build/", "!! kbx_jit.egg-info/")) for line in new), sorted(new)
    assert _git(ROOT, "status", "--porcelain", "--", str(JIT_EXAMPLE)) == built["example_status"]


def test_kbuild_inspect_lists_the_package_data(built: dict[str, Any]):
    proc = kbuild_cli("inspect", str(built["wheel"]), "--json", env=built["env"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["kernels"]) == 8  # the build's manifest
    (data,) = doc["package_data"]
    assert data["index"] == "kbx_jit/_kbuild/index.json" and data["package"] == "kbx_jit"
    got = {(e["kernel"], e["target"]): e for e in data["entries"]}
    assert len(got) == 8 and STAND_IN_TUNED <= set(got)  # package_data = "all": the baselines ship too
    assert all(e["cubin_check"] == "ok" and e["tuned"] is False for kt, e in got.items() if kt not in STAND_IN_TUNED)
    for t in built["tuned"]:
        e = got[(t["kernel"], t["target"])]
        assert e["cubin_sha256"] == t["cubin_sha256"] and e["cubin_check"] == "ok" and e["tuned"] is True
        assert e["cubin"] == f"kbx_jit/_kbuild/{t['cubin_sha256']}.cubin" and e["key"] == t["baseline_key"]
    text = kbuild_cli("inspect", str(built["wheel"]), env={**built["env"], "COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    flat = "".join((text.stdout + text.stderr).split())  # the console (stderr) wraps long lines
    assert "kbx_jit/_kbuild/index.json" in flat
    for kernel, _ in STAND_IN_TUNED:
        assert kernel in flat


def test_a_rebuild_elsewhere_and_plain_setuptools_give_the_same_wheel(built: dict[str, Any], tmp_path: Path):
    again = copy_project(JIT_EXAMPLE, tmp_path / "x" / "y" / "again")
    pip_wheel(again, tmp_path / "d1", built["env"])
    assert (tmp_path / "d1" / WHEEL).read_bytes() == built["wheel"].read_bytes()
    plain = copy_project(JIT_EXAMPLE, tmp_path / "plain")
    set_backend(plain, "setuptools.build_meta")  # only kbuild's finalize_distribution_options entry point
    pip_wheel(plain, tmp_path / "d2", built["env"])
    assert (tmp_path / "d2" / WHEEL).read_bytes() == built["wheel"].read_bytes()


# A sitecustomize for the build's processes: kbuild importable but its entry points invisible, as for a
# checkout on PYTHONPATH (not pip-installed) built with --no-build-isolation.
_HIDE_ENTRY_POINTS = """
import importlib.metadata as md, os, pathlib
_real = md.entry_points
def entry_points(**params):
    found = _real(**params)
    if params.get("group") == "setuptools.finalize_distribution_options":
        pathlib.Path(os.environ["KBUILD_TEST_HIDDEN"]).write_text("hidden")
        return md.EntryPoints(ep for ep in found if not ep.value.startswith("kbuild."))
    return found
md.entry_points = entry_points
"""


def test_the_backend_ships_package_data_when_kbuild_is_importable_but_not_installed(built: dict[str, Any],
                                                                                     tmp_path: Path):
    """On the H200, kbuild came from a checkout on PYTHONPATH: setuptools saw no entry point, and the backend
    built a wheel with an empty ``_kbuild/``. The backend now applies its setuptools plugin itself."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_HIDE_ENTRY_POINTS)
    flag = tmp_path / "hidden"
    env = {**built["env"], "PYTHONPATH": os.pathsep.join(filter(None, [str(site), built["env"].get("PYTHONPATH")])),
           "KBUILD_TEST_HIDDEN": str(flag)}
    project = copy_project(JIT_EXAMPLE, tmp_path / "p" / "jit-package")
    pip_wheel(project, tmp_path / "d", env)
    assert flag.read_text() == "hidden"  # setuptools asked, and did not see kbuild's entry point
    assert (tmp_path / "d" / WHEEL).read_bytes() == built["wheel"].read_bytes()


def test_a_second_build_in_the_same_tree_drops_what_no_longer_ships(built: dict[str, Any], tmp_path: Path):
    """setuptools keeps its build directory between builds: package data of an earlier build must not linger."""
    project = copy_project(JIT_EXAMPLE, tmp_path / "p")
    store = tmp_path / "store"
    shutil.copytree(built["store"], store)
    env = {**built["env"], "KBUILD_STORE": str(store)}
    pip_wheel(project, tmp_path / "d1", env)
    (project / "build" / "lib" / "kbx_jit" / "_kbuild" / ("0" * 64 + ".cubin")).write_bytes(b"left over")
    pip_wheel(project, tmp_path / "d2", env, config={"kbuild.targets": "sm_80"})
    names = {n for n in zipfile.ZipFile(tmp_path / "d2" / WHEEL).namelist() if n.startswith("kbx_jit/_kbuild/")}
    (mm80,) = [t for t in built["tuned"] if t["target"] == "sm_80"]
    index = json.loads(zipfile.ZipFile(tmp_path / "d2" / WHEEL).read("kbx_jit/_kbuild/index.json"))
    assert {e["target"]["name"] for e in index["entries"].values()} == {"sm_80"} and len(index["entries"]) == 4
    assert names == {"kbx_jit/_kbuild/index.json", "kbx_jit/_kbuild/__init__.py"} | {
        f"kbx_jit/_kbuild/{e['cubin']}" for e in index["entries"].values()}
    assert f"kbx_jit/_kbuild/{mm80['cubin_sha256']}.cubin" in names and f"kbx_jit/_kbuild/{'0' * 64}.cubin" not in names


@pytest.mark.hostile(fault="malformed package index", outcome="clean error")
def test_inspect_of_a_wheel_with_a_broken_index_is_a_clean_error(built: dict[str, Any], tmp_path: Path):
    bad = tmp_path / WHEEL
    with zipfile.ZipFile(built["wheel"]) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"{not json" if info.filename.endswith("_kbuild/index.json") else data)
    proc = kbuild_cli("inspect", str(bad), env=built["env"])
    assert_clean_error(proc.returncode, proc.stderr, names=[f"{bad}!kbx_jit/_kbuild/index.json"])


@pytest.mark.hostile(fault="malformed package index", outcome="degraded with warning")
def test_inspect_flags_a_cubin_whose_digest_does_not_match(built: dict[str, Any], tmp_path: Path):
    bad = tmp_path / WHEEL
    victim = f"kbx_jit/_kbuild/{built['tuned'][0]['cubin_sha256']}.cubin"
    with zipfile.ZipFile(built["wheel"]) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data[:-1] + bytes([data[-1] ^ 1]) if info.filename == victim else data)  # same size
    proc = kbuild_cli("inspect", str(bad), "--json", env={**built["env"], "COLUMNS": "1000"})
    assert proc.returncode == 1, proc.stderr  # a failed check, as a verifier says it (issue 32: it was 0)
    checks = {e["cubin"]: e["cubin_check"] for e in json.loads(proc.stdout)["package_data"][0]["entries"]}
    assert checks[victim] == "sha256 mismatch"
    assert sorted(checks.values()) == ["ok"] * 7 + ["sha256 mismatch"]  # the other tuned one and 6 baselines
    flat = "".join(proc.stderr.split())  # the console wraps long lines
    assert f"warning:{bad}!{victim}:sha256mismatch" in flat


def test_a_cmake_project_cannot_ship_package_data_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from kbuild.errors import UsageError
    from kbuild.hooks.backend import plan
    from kbuild.settings.sources import read_pyproject

    project = copy_project(JIT_EXAMPLE, tmp_path / "cmake-jit")
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + "\n[tool.scikit-build]\n")
    monkeypatch.chdir(project)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=r'pyproject.toml: \[tool.kbuild\] ship = "package-data".*scikit-build-core'):
        plan(None, out, project=read_pyproject(project / "pyproject.toml"))
    assert not out.exists()
