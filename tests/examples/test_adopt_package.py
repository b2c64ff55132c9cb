"""benchmarks/adopt_package.py's pure parts on its committed CPU recordings (benchmarks/results/adopt/): the test
counts it reads from pytest's junit report, what it says per kernel, and ``compare``'s answered share and miss
reasons. The recordings themselves come from real runs of the packages' own tests (``record``, minutes)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.script_helpers import BENCHMARKS


def _load() -> ModuleType:
    """benchmarks/adopt_package.py as a module; in sys.modules while it runs (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location("adopt_package", BENCHMARKS / "adopt_package.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["adopt_package"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["adopt_package"]
    return module


adopt = _load()
RESULTS = BENCHMARKS / "results" / "adopt"
CONCH = RESULTS / "conch_cpu.recording.json"


def test_junit_counts_reads_outcomes_per_file(tmp_path: Path) -> None:
    (tmp_path / "test_three.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    assert False\n"
        "@pytest.mark.skip\ndef test_skipped():\n    pass\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    "--junitxml", str(junit), "test_three.py"], cwd=tmp_path, capture_output=True, check=False)
    counts = adopt.junit_counts(junit, tmp_path)
    assert counts["total"] == {"run": 2, "passed": 1, "failed": 1, "errors": 0, "skipped": 1}
    assert list(counts["files"]) == ["test_three.py"]
    assert counts["ids"] == ["test_three.py::test_bad", "test_three.py::test_ok", "test_three.py::test_skipped"]
    assert adopt.junit_counts(tmp_path / "absent.xml") == {"error": "no junit report (pytest did not finish)"}


def test_analyse_separates_the_tests_own_kernels_and_counts_autotuned_ones() -> None:
    recording = json.loads(CONCH.read_text())
    got = adopt.analyse(recording, "conch", {})
    kernels = {k["function"]: k for k in got["kernels"]}
    # conch's tests define kernels of their own (bitsandbytes' NF4/FP4 references): counted apart
    assert got["test_file_kernels"] and all(not f.startswith("conch.") for f in got["test_file_kernels"])
    nms = kernels["conch.kernels.vision.nms:_create_iou_mask_kernel"]
    assert nms["from"] == "package" and nms["autotune"]["configs"] == 5 and nms["autotune"]["key"] == ["num_boxes"]
    sm90 = got["package_kernels_per_target"]["sm_90"]
    assert sm90["autotuned_kernels"] == 2
    assert sm90["specializations"] == sum(k["per_target"].get("sm_90", {}).get("specializations", 0)
                                          for k in got["kernels"] if k["from"] == "package")


def test_compare_answers_a_recording_by_itself_and_names_each_miss(tmp_path: Path) -> None:
    same = adopt.compare(CONCH, CONCH, "sm_90")
    assert same["launched"] > 0 and same["answered"] == same["launched"] and same["misses"] == []

    from kbuild.record.format import dumps, load

    rec = load(str(CONCH))  # edited through the format, so that each id is the hash of what it names again
    by_fn = {k.function: k for k in rec.kernels.values()}
    by_fn["conch.kernels.normalization.rms_norm:_rms_norm_kernel"].source_hash = "0" * 16
    gemm = by_fn["conch.kernels.quantization.gemm:_gemm_kernel"]
    changed = next(s for s in gemm.specializations.values() if s.target == "sm_90" and s.calls)
    name = sorted(changed.constexprs)[0]
    changed.constexprs[name] = "another value"
    changed._id = None
    base = tmp_path / "base.json"
    base.write_text(dumps(rec))
    got = adopt.compare(base, CONCH, "sm_90")
    reasons = {(m["function"], m["why"]) for m in got["misses"]}
    assert ("conch.kernels.normalization.rms_norm:_rms_norm_kernel",
            "another source hash (a module-level value folded at import differs)") in reasons
    gemm_why = {why for fn, why in reasons if fn == "conch.kernels.quantization.gemm:_gemm_kernel"}
    assert gemm_why == {f"nearest differs in constexprs, constexprs.{name}"}
    assert got["answered"] == got["launched"] - len(got["misses"]) < same["answered"]


@pytest.mark.parametrize("name", sorted(adopt.PACKAGES))
def test_each_package_runs_files_that_exist_and_names_what_it_leaves_out(name: str) -> None:
    pkg = adopt.PACKAGES[name]
    assert pkg.files and pkg.left_out
    if pkg.sdist_tests is None:  # committed: the repository's tests at the release tag, unchanged
        root = BENCHMARKS / "adopt" / name
        assert all((root / f).is_file() for f in pkg.files)
        assert (root / "tests" / "LICENSE").is_file()


def test_verify_runs_again_exactly_the_tests_the_recording_finished(tmp_path: Path) -> None:
    """A class, a parametrised test and a test the recording's run never reached: the junit report's node ids
    select, through the plugin ``verify --same-tests`` writes, exactly the tests that finished."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_some.py").write_text(
        "import pytest\n"
        "class TestGroup:\n    def test_in_class(self):\n        pass\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_param(n):\n    pass\n"
        "def test_not_reached():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    junit = tmp_path / "junit.xml"
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit)]
    subprocess.run([*run, "tests/test_some.py", "--deselect", "tests/test_some.py::test_not_reached"],
                   cwd=tmp_path, capture_output=True, check=True)
    ids = adopt.junit_counts(junit, tmp_path)["ids"]
    assert ids == ["tests/test_some.py::TestGroup::test_in_class", "tests/test_some.py::test_param[1]",
                   "tests/test_some.py::test_param[2]"]
    report = tmp_path / "record.json"
    report.write_text(json.dumps({"tests": {"ids": ids}}))
    assert adopt.same_test_ids(report) == ids
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "kbx_same_tests.py").write_text(adopt.SAME_TESTS_PLUGIN)
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    import os

    env = dict(os.environ, PYTHONPATH=str(tmp_path / "plugin"), KBX_SAME_TESTS=str(tmp_path / "ids.txt"))
    again = subprocess.run([*run, "-p", "kbx_same_tests", "tests/test_some.py"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert adopt.junit_counts(junit, tmp_path)["ids"] == ids and "3 passed, 1 deselected" in again.stdout
    report.write_text(json.dumps({"tests": {"files": {}}}))
    with pytest.raises(SystemExit, match=r"record.json: tests.ids: expected the node ids"):
        adopt.same_test_ids(report)
