"""The build takes recordings as declarations (issue 34, part 2): real recordings, real Triton compiles.

``[tool.kbuild] recordings`` makes every recorded specialisation a kernel entry for every target
(:mod:`kbuild.build.recorded`), keyed as a hand-written declaration of the same call is; an autotuned kernel's
entries carry the choice a GPU recording measured or a Triton autotune cache holds (:mod:`kbuild.build.choices`);
a kernel whose module decides at import what it compiles to is imported as on the recording machine
(:mod:`kbuild.compile.folded`); what a recording does not cover on another GPU, and what cannot be built, is
reported; and the package data answers every recorded call, as the run time's own lookup says
(:func:`kbuild.record.covers.recording_coverage`, what ``kbuild inspect --recording`` says). examples/jit-package's wheel (with its committed recording) is built in
tests/hooks/test_backend_package_data.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import assert_clean_error
from test_record import HERE, ROOT, _liger_installed, record

from kbuild.cli import main
from kbuild.record import format as fmt
from kbuild.record.covers import recording_coverage
from kbuild.runtime.index import load_index

JIT = ROOT / "examples" / "jit-package"
PY = sys.executable


def coverage(rec: fmt.Recording, indexes: list[Any]) -> dict[str, Any]:
    """The run time's answer to each recorded specialisation and tuning (``kbuild inspect --recording``'s)."""
    return recording_coverage(indexes, rec)


def _zero_jit(cov: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded specialisations answered without compiling."""
    return [r for r in cov["rows"] if r["answered"] and r["stage"] == "zero-jit"]


def _project(tmp_path: Path, *, targets: tuple[str, ...] = ("sm_90",), copy: tuple[Path, ...] = (),
             extra: str = "") -> Path:
    """A project in ``tmp_path/proj`` shipping package data from ``rec.json`` for ``targets``, with ``copy``
    (modules or packages) beside its pyproject.toml."""
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    for src in copy:
        (shutil.copytree if src.is_dir() else shutil.copy)(src, proj / src.name)
    (proj / "pyproject.toml").write_text(
        "[project]\nname = \"kbx-rec\"\nversion = \"0.1.0\"\n\n[tool.kbuild]\nship = \"package-data\"\n"
        f"package = \"kbx_rec\"\ntargets = {json.dumps(list(targets))}\ntune = \"off\"\n"
        f"recordings = [\"rec.json\"]\n{extra}")
    return proj


def _build(proj: Path, kbuild_env: Any, tmp_path: Path) -> tuple[Any, Any]:
    """Plan the project's build (real compiles, into a store of its own) and write its package data; (the plan, what
    was written)."""
    from kbuild.build.package_data import write_package_data
    from kbuild.build.plan import plan
    from kbuild.settings.sources import load_settings

    kbuild_env.set(store=str(tmp_path / "store"))
    settings = load_settings(proj / "pyproject.toml")
    result = plan(settings)
    return result, write_package_data(settings, result.builds, tmp_path / "pkg", package="kbx_rec")


def _resolve(proj: Path) -> tuple[list[Any], Any]:
    """The recorded builds of the project (keys, no compile) and the report."""
    from kbuild.build.recorded import recorded_builds
    from kbuild.settings.sources import load_settings

    settings = load_settings(proj / "pyproject.toml")
    return recorded_builds(settings, list(settings.parsed_targets))


# ----------------------------------------------------------------------------------------------
# examples/jit-package: a recorded entry is the hand-written one


def test_the_committed_example_recording_is_what_its_workload_records(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(JIT / "workload.py"), args=("--target", "sm_80,sm_90")) == 0
    assert out.read_bytes() == (JIT / "kbuild-recording.json").read_bytes()


def test_a_recorded_entry_keys_as_the_hand_written_declaration_of_the_same_call() -> None:
    from kbuild.build.recorded import collapse, recorded_builds
    from kbuild.build.resolve import resolve
    from kbuild.settings.sources import load_settings

    settings = load_settings(JIT / "pyproject.toml")
    targets = list(settings.parsed_targets)
    declared = resolve(settings, settings.kernels, targets)
    recorded, report = recorded_builds(settings, targets)
    assert report.specializations == 8 and report.declarations == 4 and len(recorded) == 8
    for b in declared:  # the recording holds each declared call (64-row softmax, 256 × 128 × 256 matmul)
        (same,) = [r for r in recorded if r.spec.source == b.spec.source and r.target == b.target
                   and r.spec.signature == b.spec.signature and r.spec.constexprs == b.spec.constexprs]
        assert same.spec.name != b.spec.name and same.baseline_key.hex == b.baseline_key.hex
        assert same.baseline_key.components == b.baseline_key.components
    builds = collapse(declared, recorded, report)
    assert len(builds) == 8 and report.collapsed == 4 and report.built == 4
    assert [b.spec.name for b in builds[:4]] == [b.spec.name for b in declared]  # the hand-written entries first
    new = {(b.spec.name.rpartition("_")[0], b.spec.signature["n_cols" if "n_cols" in b.spec.signature else "M"])
           for b in builds[4:]}
    assert new == {("softmax", "i32"), ("matmul_leaky_relu", "i32")}  # 1,000 columns; 100 rows
    assert any("declared in [tool.kbuild.kernels] as 'softmax' too: built once" in line for line in report.lines)


def test_specialisations_recorded_for_a_target_the_project_does_not_build_are_reported(tmp_path: Path) -> None:
    assert record(tmp_path, tmp_path / "proj" / "rec.json", str(JIT / "workload.py"),
                  args=("--target", "sm_75")) == 0
    builds, report = _resolve(_project(tmp_path, targets=("sm_90",), extra=f"python_path = [{json.dumps(str(JIT))}]\n"))
    assert {b.target.name for b in builds} == {"sm_90"} and len(builds) == 4
    assert any(line.startswith("4 specialisation(s) recorded for sm_75, which this project does not build")
               for line in report.lines), report.lines


# ----------------------------------------------------------------------------------------------
# A package that probes the GPU at import


PROBE = HERE / "probe" / "kbx_probe"


def _probe_recording(tmp_path: Path) -> fmt.Recording:
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    assert record(tmp_path, proj / "rec.json", str(HERE / "workload_probe.py"), "--as-gpu",
                  args=("--target", "sm_90")) == 0
    return fmt.load(str(proj / "rec.json"))


def test_a_kernel_that_probes_the_gpu_at_import_is_built_as_the_gpu_imports_it(tmp_path: Path,
                                                                                kbuild_env: Any) -> None:
    rec = _probe_recording(tmp_path)
    (kernel,) = rec.kernels.values()
    assert kernel.globals["kbx_probe.kernels:PRECISION"] == {"constexpr": "tf32"}
    assert kernel.globals["kbx_probe.kernels:softplus"] == {"jit": "kbx_probe.kernels:_softplus_fast"}
    proj = _project(tmp_path, copy=(PROBE,))
    result, data = _build(proj, kbuild_env, tmp_path)
    (entry,) = data.index["entries"].values()
    assert entry["source_hash"] == kernel.source_hash
    assert result.builds[0].recorded.imported_as == kernel.globals
    assert result.manifest["kernels"][0]["recorded"]["imported_as_recorded"] is True
    said = "\n".join(result.status_lines())
    assert "imported as on the recording machine" in said and "PRECISION: recorded constexpr 'tf32', here " \
           "constexpr 'ieee'" in said and "_softplus_fast" in said
    # The run time's key of the call, in a process that imports kbx_probe as a GPU machine does, finds the entry;
    # this process (a CPU machine's import) keys the same call otherwise.
    probe = f"""
import json, sys, torch
if sys.argv[1] == "gpu":
    torch.cuda.is_available = lambda: True
sys.path.insert(0, {str(proj)!r})
from kbx_probe import kernels
from kbuild.runtime.index import load_index
from kbuild.runtime.keys import specialization_for_call
from kbuild.runtime.lookup import find
x, w = torch.randn(64, 32), torch.randn(32, 32)
call = specialization_for_call(kernels.dense_softplus, x, w, torch.empty(64, 32), 64, 32, 32, BLOCK=32, cc=90)
index = load_index({str(data.data_dir / "index.json")!r})
found = find(index.by_function()["kbx_probe.kernels:dense_softplus"], call)
print(json.dumps(getattr(found, "key", None)))
"""
    answers = {}
    for machine in ("gpu", "cpu"):
        proc = subprocess.run([PY, "-c", probe, machine], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        answers[machine] = json.loads(proc.stdout.splitlines()[-1])
    assert answers == {"gpu": next(iter(data.index["entries"])), "cpu": None}
    cov = coverage(rec, [load_index(data.data_dir / "index.json")])
    assert len(_zero_jit(cov)) == cov["specializations"] == 1


@pytest.mark.parametrize("edit, named", [
    (lambda k: k.pop("globals"), "keeps no module-level values to set back"),
    (lambda k: k["globals"].update({"kbx_probe.kernels:softplus": {"jit": "kbx_probe.kernels:_softplus_gone"}}),
     "kbx_probe.kernels:_softplus_gone does not exist here"),
    (lambda k: k["globals"].update({"kbx_probe.kernels:PRECISION": {"constexpr": "bf16x3"}}),
     "they still do not give the recorded hash"),
])
def test_a_kernel_that_cannot_be_imported_as_recorded_is_named_and_not_built(tmp_path: Path, edit: Any,
                                                                             named: str) -> None:
    _probe_recording(tmp_path)
    path = tmp_path / "proj" / "rec.json"
    doc = json.loads(path.read_text())
    edit(doc["kernels"][0])
    path.write_text(json.dumps(doc))
    builds, report = _resolve(_project(tmp_path, copy=(PROBE,)))
    assert builds == [] and report.not_built == 1
    (line,) = [line for line in report.lines if "kbx_probe.kernels:dense_softplus" in line]
    assert "not built" in line and "recorded source hash" in line and named in line, line


# ----------------------------------------------------------------------------------------------
# @triton.autotune: a choice per target, and where it came from


KERNELS = HERE / "record_kernels.py"
SCALE_KEYS = [[1024, "torch.float32", "torch.float32"], [4096, "torch.float32", "torch.float32"]]


def _entries(data: Any, name: str, target: str) -> list[dict[str, Any]]:
    return [e for e in data.index["entries"].values()
            if e["function"] == f"record_kernels:{name}" and e["target"]["name"] == target]


@pytest.mark.slow
def test_a_gpu_recordings_measured_choice_ships_for_its_target_only(tmp_path: Path, kbuild_env: Any) -> None:
    """workload_kernels --fake-gpu: Triton's hooks on a stand-in sm_90 driver that compiles for real, whose
    benchmarker makes each autotuner choose its last config (1). ``scale`` has an @triton.heuristics layer outside
    its autotuner."""
    from kbuild.record import session

    rec = session.run([PY, str(HERE / "workload_kernels.py"), "--fake-gpu"], session.Options(mode="gpu")).recording
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "rec.json").write_text(fmt.dumps(rec))
    proj = _project(tmp_path, targets=("sm_80", "sm_90"), copy=(KERNELS,))
    result, data = _build(proj, kbuild_env, tmp_path)
    for name, tensors, block in (("scale", 2, 128), ("shift", 1, 64)):
        carried = [e for e in _entries(data, name, "sm_90") if "autotune" in e]
        (chosen,) = carried  # both keys chose config 1, one specialisation: the entry carries both keys
        assert chosen["autotune"]["key"] == [1024, *["torch.float32"] * tensors]
        assert chosen["autotune"]["also_keys"] == [[4096, *["torch.float32"] * tensors]]
        assert chosen["config"]["kwargs"]["BLOCK"] == block  # config 1
        assert "recording (measured on sm_90 (132 SMs))" in chosen["note"]
        assert f"also the choice for key(s) {[4096, *['torch.float32'] * tensors]}" in chosen["note"]
        assert not [e for e in _entries(data, name, "sm_80") if "autotune" in e]  # measured on sm_90 only
    scale = [e for e in result.manifest["kernels"] if e["kernel"].startswith("scale_") and e["target"] == "sm_90"]
    assert sorted(str(e["recorded"]["autotune"]["choice"]) for e in scale) == ["None", "recording"]
    assert any("scale on sm_80: no autotune choice for 2 key(s)" in line for line in result.recordings.lines)
    cov = coverage(rec, [load_index(data.data_dir / "index.json")])
    assert len(_zero_jit(cov)) == cov["specializations"]
    answered = {(t["function"].rpartition(":")[2], t["target"], t["key"][0]) for t in cov["tuning_rows"]
                if t["answered"]}
    assert answered == {("scale", "sm_90", 1024), ("shift", "sm_90", 1024), ("scale", "sm_90", 4096),
                        ("shift", "sm_90", 4096)}
    from kbuild.commands.inspect import choice_cell

    cells = sorted(choice_cell(e) for e in result.manifest["kernels"] if e["kernel"].startswith(("scale", "shift")))
    assert cells == ["none: Triton autotunes"] * 6 + [  # the other sm_90 config, both sm_80 configs
        "recording [1024, 'torch.float32', 'torch.float32']", "recording [1024, 'torch.float32']"]
    manifest = tmp_path / "kbuild.json"
    manifest.write_text(json.dumps(result.manifest))
    proc = subprocess.run([PY, "-m", "kbuild", "inspect", str(manifest)], capture_output=True, text=True,
                          check=False, env=_env())
    assert proc.returncode == 0, proc.stderr
    words = set((proc.stdout + proc.stderr).split())  # the table wraps its cells: the column's words are there
    assert {"autotune", "choice", "recording", "autotunes"} <= words


_FILL_AUTOTUNE_CACHE = """
import sys
sys.path.insert(0, sys.argv[1])
from workload_kernels import FakeGpu
from triton.runtime.driver import driver
driver.set_active(FakeGpu())
import record_kernels
tuner = record_kernels.scale.fn  # @triton.heuristics over @triton.autotune
def bench():  # config 0 the fastest (a stand-in for timings measured on an sm_90 GPU)
    tuner.configs_timings = {tuner.configs[0]: [1.0, 1.0, 1.0], tuner.configs[1]: [2.0, 2.0, 2.0]}
tuner.check_disk_cache((1024, "torch.float32", "torch.float32"), tuner.configs, bench)
"""


def test_a_triton_autotune_cache_gives_the_choice_a_cpu_recording_lacks(tmp_path: Path) -> None:
    """The cache file is written by Triton 3.6's own ``Autotuner.check_disk_cache`` (on the stand-in sm_90 driver),
    under the key Triton computes; the build finds it under the key it computes for the recorded tuning key."""
    (tmp_path / "proj").mkdir()
    assert record(tmp_path, tmp_path / "proj" / "rec.json", str(HERE / "workload_kernels.py"),
                  args=("--target", "sm_90")) == 0
    cache = tmp_path / "proj" / "autotune-cache"
    proc = subprocess.run([PY, "-c", _FILL_AUTOTUNE_CACHE, str(HERE)], capture_output=True, text=True,
                          check=False, env={**_env(), "TRITON_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list(cache.glob("*/scale.autotune.json"))) == 1
    without, _ = _resolve(_project(tmp_path, copy=(KERNELS,)))
    assert not [b for b in without if b.recorded.autotune_key]
    (tmp_path / "proj" / "pyproject.toml").write_text(
        (tmp_path / "proj" / "pyproject.toml").read_text() + "autotune_caches = [\"autotune-cache\"]\n")
    builds, report = _resolve(tmp_path / "proj")
    (chosen,) = [b for b in builds if b.recorded.autotune_key]
    assert chosen.spec.name.startswith("scale_") and chosen.recorded.choice == "triton-cache"
    assert chosen.recorded.autotune_key == SCALE_KEYS[0] and chosen.spec.constexprs["BLOCK"] == 64  # config 0
    assert any("key [1024, 'torch.float32', 'torch.float32']: config 0 (triton-cache: Triton autotune cache" in line
               for line in report.lines), report.lines


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}


# ----------------------------------------------------------------------------------------------
# What a recording from one machine does not cover on another


def test_what_a_cpu_recording_does_not_cover_on_a_gpu_is_reported(tmp_path: Path) -> None:
    """``rows`` is launched like Liger's RMSNorm backward: one program per SM, ``rows_per_program = ceil(n_rows /
    sm_count)``. Recorded on a CPU (one SM, 2,048 and 4,096 rows: ``i32:16`` both), on an A100's 108 SMs it is 19 and
    38 (``i32``: another specialisation); on an H100's 132 SMs 16 and 32 (``i32:16``: covered)."""
    (tmp_path / "proj").mkdir()
    assert record(tmp_path, tmp_path / "proj" / "rec.json", str(HERE / "workload_kernels.py"),
                  args=("--target", "sm_90")) == 0
    _, report = _resolve(_project(tmp_path, targets=("sm_80", "sm_90"), copy=(KERNELS,)))
    rows = [line for line in report.lines if line.startswith("record_kernels:rows")]
    assert len(rows) == 1, report.lines
    assert "on sm_80: not covered: rows_per_program = ceil(n_rows / sm_count): 19 (i32) with 108 SMs" in rows[0]
    assert "(A100): record on such a GPU" in rows[0]


# ----------------------------------------------------------------------------------------------
# Bad recordings: one error line naming the file and the key, exit 2, nothing written


def _committed() -> dict[str, Any]:
    return json.loads((JIT / "kbuild-recording.json").read_text())


def _module(doc: dict[str, Any], name: str) -> dict[str, Any]:
    doc["kernels"][0]["module"] = name
    doc["kernels"][0]["function"] = f"{name}:{doc['kernels'][0]['qualname']}"
    return doc


@pytest.mark.hostile(fault="malformed recording given to the build", outcome="clean error")
@pytest.mark.parametrize("content, named", [
    (b"[1, 2]", ["rec.json", "expected a JSON object"]),
    (json.dumps({**_committed(), "format": "other"}).encode(), ["rec.json", "format"]),
    (json.dumps({**_committed(), "version": 2}).encode(), ["rec.json", "version", "version 2 is not supported"]),
    (json.dumps({**_committed(), "kernels": [{**_committed()["kernels"][0], "extra": 1}]}).encode(),
     ["rec.json", "kernels[0]", "unknown key 'extra'"]),
    (json.dumps(_module(_committed(), "kbx_jit.no_such_module")).encode(),
     ["rec.json", "kernels[0].module", "cannot import module 'kbx_jit.no_such_module'"]),
    (None, ["pyproject.toml", "recordings[0]", "no such recording"]),
])
def test_a_bad_recording_is_one_clean_error_and_nothing_is_written(tmp_path: Path, capsys: Any,
                                                                   content: bytes | None, named: list[str]) -> None:
    proj = tmp_path / "proj"
    shutil.copytree(JIT, proj, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    if content is None:
        (proj / "kbuild-recording.json").unlink()
    else:
        (proj / "pyproject.toml").write_text((proj / "pyproject.toml").read_text().replace(
            'recordings = ["kbuild-recording.json"]', 'recordings = ["rec.json"]'))
        (proj / "rec.json").write_bytes(content)
    out = tmp_path / "out"
    out.mkdir()
    code = main(["package-data", "--config", str(proj / "pyproject.toml"), "--out", str(out)])
    err = capsys.readouterr().err
    assert_clean_error(code, err, names=named)
    assert err.count("error: ") == 1
    assert list(out.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# Liger-Kernel's wrappers on CPU tensors


@pytest.mark.slow
def test_liger_wrappers_recorded_on_a_cpu_build_into_package_data_that_answers_them(tmp_path: Path,
                                                                                    kbuild_env: Any) -> None:
    """Every recorded specialisation is compiled for sm_90 and the package data answers every recorded call, the
    autotuned ``_dyt_fwd_kernel`` configurations whose cubins are byte-identical included (each entry of such a
    group lists the others in ``shares_cubin_with``, which kbuild.runtime.verify.pairing_conflicts requires). No CPU
    recording holds an autotune choice: Triton benchmarks dyt's configurations on the first call, each from a
    shipped cubin."""
    if not _liger_installed():
        pytest.skip("needs liger-kernel==0.8.5")
    (tmp_path / "proj").mkdir()
    assert record(tmp_path, tmp_path / "proj" / "rec.json", str(HERE / "workload_liger.py"),
                  args=("--target", "sm_90")) == 0
    rec = fmt.load(str(tmp_path / "proj" / "rec.json"))
    result, data = _build(_project(tmp_path), kbuild_env, tmp_path)
    r = result.recordings
    assert r.specializations == 48 and r.declarations == 48 and r.built == 48 and r.not_built == 0
    cov = coverage(rec, [load_index(data.data_dir / "index.json")])
    shared = {k: e for k, e in data.index["entries"].items() if e.get("shares_cubin_with")}
    missed = [row for row in cov["rows"] if not row["answered"]]
    assert missed == [] and data.skipped == []
    assert shared and all(e["function"].endswith(":_dyt_fwd_kernel") for e in shared.values())  # 18 of them here
    assert len(_zero_jit(cov)) == cov["answered"] == 48 and cov["tunings_answered"] == 0
    print(f"liger: {r.specializations} recorded, {r.built} compiled, {cov['answered']} answered; "
          f"{len(shared)} entries share a cubin with another configuration's")


def test_a_recorded_entrys_name_never_makes_a_reserved_c_name() -> None:
    """Liger's kernels are private (``_dyt_fwd_kernel``): ``kbuild_`` + ``_dyt...`` was a reserved C identifier
    (a double underscore) and the backend's C rendering stopped the build."""
    from kbuild.build.recorded import entry_stem

    assert entry_stem("_dyt_fwd_kernel") == "dyt_fwd_kernel"
    assert entry_stem("__a__b_") == "a_b" and entry_stem("___") == "kernel"


def test_a_kernel_the_workload_defines_itself_is_reported_not_fatal(tmp_path: Path, capsys: Any) -> None:
    """A recording of a package's tests holds kernels defined in the test files (conch-triton-kernels'
    ``dequantize_blockwise_test``): a module that is neither the project's nor an installed distribution's is left
    out and named in the build's report, and the build goes on (it stopped with an error naming the module)."""
    proj = tmp_path / "proj"
    shutil.copytree(JIT, proj, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    (proj / "pyproject.toml").write_text((proj / "pyproject.toml").read_text().replace(
        'recordings = ["kbuild-recording.json"]', 'recordings = ["rec.json"]'))
    (proj / "rec.json").write_text(json.dumps(_module(_committed(), "dequantize_blockwise_test")))
    out = tmp_path / "out"
    out.mkdir()
    code = main(["package-data", "--config", str(proj / "pyproject.toml"), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    said = "".join((captured.out + captured.err).split())  # the console wraps long lines
    assert "".join("'dequantize_blockwise_test' is neither a module of this project".split()) in said
    assert (out / "_kbuild" / "index.json").is_file()


def _measured_on_a_gpu_whose_import_differs(rec_path: Path, *, key: list[str] | None = None) -> None:
    """Edit a CPU recording of ``scale`` into what a GPU machine's recording is when the package picks its
    configurations at import from the hardware (fla's ``BS_LIST`` from the GPU's shared memory): a third
    configuration this machine's import does not have, every tuning key measured there with config 1 chosen.
    ``key``: the recorded autotuner's key arguments instead (a package whose key itself differs)."""
    doc = json.loads(rec_path.read_text())
    (kernel,) = [k for k in doc["kernels"] if k["function"] == "record_kernels:scale"]
    kernel["autotune"]["configs"].append({"kwargs": {"BLOCK": 256}, "maxnreg": None, "num_ctas": 1, "num_stages": 3,
                                          "num_warps": 8})
    if key is not None:
        kernel["autotune"]["key"] = key
    for t in kernel["tunings"]:
        t.update(choice=1, configs=[0, 1, 2], sm_count=132, source="measured")
    rec_path.write_text(json.dumps(doc))


def test_a_measured_choice_ships_though_this_import_gives_other_configurations(tmp_path: Path) -> None:
    from kbuild.build.choices import Question, TritonAutotuneCache
    from kbuild.targets import parse_target

    (tmp_path / "proj").mkdir()
    rec_path = tmp_path / "proj" / "rec.json"
    assert record(tmp_path, rec_path, str(HERE / "workload_kernels.py"), args=("--target", "sm_90")) == 0
    import record_kernels

    def cache_file() -> str | None:  # the Triton autotune cache file this import would look the choice up in
        kernel = next(k for k in fmt.load(str(rec_path)).kernels.values() if k.function == "record_kernels:scale")
        question = Question(kernel, parse_target("sm_90"), tuple(SCALE_KEYS[0]), (0, 1), record_kernels.scale.fn,
                            record_kernels.scale.fn.fn)
        return TritonAutotuneCache([tmp_path]).path_of(question)

    assert str(cache_file()).endswith("/scale.autotune.json")
    _measured_on_a_gpu_whose_import_differs(rec_path)
    assert cache_file() is None  # the configurations' text names the file: this import cannot give the recorded one
    builds, report = _resolve(_project(tmp_path, copy=(KERNELS,)))
    (chosen,) = [b for b in builds if b.recorded.autotune_key and b.spec.name.startswith("scale_")]
    assert chosen.recorded.choice == "recording" and chosen.spec.constexprs["BLOCK"] == 128  # config 1
    assert chosen.recorded.autotune_key == SCALE_KEYS[0]
    said = "\n".join(report.lines)
    assert "record_kernels:scale: its @triton.autotune configurations here differ from the recorded ones (2 here, " \
           "3 recorded, not the same" in said and "Triton's autotune cache is not asked" in said, said


def test_a_recorded_autotuner_whose_key_differs_here_ships_no_choice(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    rec_path = tmp_path / "proj" / "rec.json"
    assert record(tmp_path, rec_path, str(HERE / "workload_kernels.py"), args=("--target", "sm_90")) == 0
    _measured_on_a_gpu_whose_import_differs(rec_path, key=["n", "factor"])
    builds, report = _resolve(_project(tmp_path, copy=(KERNELS,)))
    assert not [b for b in builds if b.recorded.autotune_key and b.spec.name.startswith("scale_")]
    assert any("record_kernels:scale: its @triton.autotune here has not the recorded key or pruning: no choice "
               "ships" in line for line in report.lines), report.lines
