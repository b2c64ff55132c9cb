"""``kbuild record`` (issue 34, part 1): real workloads on CPU tensors, real Triton, real packages.

Each recording runs a workload script of this folder as a child process under the recorder (``--mode cpu``:
launches recorded instead of run; ``--mode gpu`` through Triton's own hooks, driven here by the workload's
CPU stand-in for the driver, which compiles for real and launches nothing). The recorded specialisations must
key as the run time keys the call and as the build keys the matching declaration
(``kbuild.record.format.call_specialization`` → ``CallSpecialization.key``), for examples/jit-package and for
Liger-Kernel 0.8.5's wrappers (``examples/liger``'s declarations).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import assert_clean_error, tree_digest

from kbuild.cli import main
from kbuild.record import format as fmt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = sys.executable


@pytest.fixture(autouse=True)
def _shared_triton_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One Triton cache for this module's compiles (the --mode gpu stand-in compiles with ptxas)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(_cache(tmp_path_factory)))
    monkeypatch.delenv("PYTHONPATH", raising=False)


_CACHE: list[Path] = []


def _cache(factory: pytest.TempPathFactory) -> Path:
    if not _CACHE:
        _CACHE.append(factory.mktemp("record-triton-cache"))
    return _CACHE[0]


def record(tmp_path: Path, out: Path, *workload: str, args: tuple[str, ...] = (), capsys: Any = None) -> int:
    """``kbuild record --mode cpu --out OUT ARGS -- python WORKLOAD...`` in ``tmp_path``, in this process."""
    argv = ["record", "--mode", "cpu", "--out", str(out), *args, "--", PY, *workload]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        return main(argv)


def _declared(example: Path) -> list[Any]:
    from kbuild.build.resolve import resolve, select_targets
    from kbuild.settings.sources import load_settings

    settings = load_settings(example / "pyproject.toml")
    return resolve(settings, settings.kernels, select_targets(settings, None))


def _matching(rec: fmt.Recording, build: Any) -> tuple[fmt.Kernel, fmt.Specialization] | None:
    """The recorded specialisation a declared entry describes (same function, target, signature, constexprs,
    warps and stages), if any."""
    declared = {k: "".join(v.split()) for k, v in build.spec.signature.items()}
    for kernel in rec.kernels.values():
        if f"{kernel.module}:{kernel.name}" != build.spec.source:
            continue
        for spec in kernel.specializations.values():
            if (spec.target == build.target.name and spec.signature == declared
                    and spec.constexprs == build.spec.constexprs
                    and spec.options.get("num_warps") == build.spec.num_warps
                    and spec.options.get("num_stages") == build.spec.num_stages):
                return kernel, spec
    return None


def _key_of(rec: fmt.Recording, kernel: fmt.Kernel, spec: fmt.Specialization, build: Any) -> str:
    call = fmt.call_specialization(rec, kernel, spec)
    assert call.unsupported is None
    return str(call.key(ptxas_version=build.baseline_key.components["compiler"]["ptxas"],
                        declared=build.spec.signature, distribution=kernel.distribution).hex)


# ----------------------------------------------------------------------------------------------
# examples/jit-package


def test_jit_package_calls_key_as_the_build_keys_its_declarations(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(HERE / "workload_jit.py"), args=("--target", "sm_80,sm_90")) == 0
    rec = fmt.load(str(out))
    assert {k.function for k in rec.kernels.values()} == {"kbx_jit.kernels:softmax",
                                                          "kbx_jit.kernels:matmul_leaky_relu"}
    builds = _declared(ROOT / "examples" / "jit-package")
    assert len(builds) == 4
    for b in builds:
        found = _matching(rec, b)
        assert found is not None, (b.spec.name, b.target.name)
        assert _key_of(rec, *found, b) == b.baseline_key.hex, (b.spec.name, b.target.name)
        assert found[0].distribution is None  # a module of the project
    softmax = next(k for k in rec.kernels.values() if k.name == "softmax")
    (sm90,) = [s for s in softmax.specializations.values() if s.target == "sm_90"]
    assert sm90.calls == 2 and [s["args"]["in_ptr"]["shape"] for s in sm90.samples] == [[128, 1024], [64, 1024]]
    assert sm90.samples[0]["grid"] == [128] and sm90.samples[0]["sm_count"] == 1


def test_the_recorded_call_is_the_run_times_specialisation_of_the_same_call(tmp_path: Path) -> None:
    """Against :func:`kbuild.runtime.keys.specialization_for_call` of the same call made in this process."""
    import torch

    from kbuild.runtime.keys import specialization_for_call

    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(HERE / "workload_jit.py"), "softmax:64") == 0
    rec = fmt.load(str(out))
    (kernel,) = rec.kernels.values()
    (spec,) = kernel.specializations.values()
    sys.path.insert(0, str(ROOT / "examples" / "jit-package"))
    try:
        from kbx_jit import kernels
    finally:
        sys.path.pop(0)
    x = torch.randn(64, 1024).half()
    out_t = torch.empty_like(x)
    direct = specialization_for_call(kernels.softmax, out_t, x, 1024, 1024, 1024, BLOCK=1024, num_warps=4,
                                     num_stages=3, cc=90)
    assert fmt.call_specialization(rec, kernel, spec) == direct


# ----------------------------------------------------------------------------------------------
# Liger-Kernel's wrappers

LIGER = "0.8.5"


def _liger_installed() -> bool:
    try:
        return md.version("liger-kernel") == LIGER
    except md.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def liger_recording(tmp_path_factory: pytest.TempPathFactory) -> fmt.Recording:
    if not _liger_installed():
        pytest.skip(f"needs liger-kernel=={LIGER} (pip install --no-deps liger-kernel=={LIGER})")
    tmp = tmp_path_factory.mktemp("liger")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(_cache(tmp_path_factory)))
        assert record(tmp, tmp / "rec.json", str(HERE / "workload_liger.py"), args=("--target", "sm_80,sm_90")) == 0
    return fmt.load(str(tmp / "rec.json"))


def test_liger_wrappers_key_as_examples_liger_declares(liger_recording: fmt.Recording) -> None:
    rec = liger_recording
    builds = _declared(HERE / "liger_handwritten")
    assert len(builds) == 28
    for b in builds:
        found = _matching(rec, b)
        assert found is not None, (b.spec.name, b.target.name)
        kernel, spec = found
        assert kernel.distribution == {"name": "liger_kernel", "version": LIGER}
        assert _key_of(rec, kernel, spec, b) == b.baseline_key.hex, (b.spec.name, b.target.name)


def test_liger_dyt_records_its_autotuner_key_and_every_config(liger_recording: fmt.Recording) -> None:
    (dyt,) = [k for k in liger_recording.kernels.values() if k.name == "_dyt_fwd_kernel"]
    assert dyt.autotune is not None and dyt.autotune["key"] == ["N"] and len(dyt.autotune["configs"]) == 18
    keys = {tuple(t["key"]) for t in dyt.tunings if t["target"] == "sm_90"}
    assert keys == {(4096, *["torch.float16"] * 5), (4096, *["torch.bfloat16"] * 5)}
    assert all(t["choice"] is None and t["source"] is None and t["configs"] == list(range(18)) for t in dyt.tunings)
    assert {s.autotune_config for s in dyt.specializations.values()} == set(range(18))


def test_liger_rms_norm_backward_rows_per_program_is_marked_as_machine_dependent(
        liger_recording: fmt.Recording) -> None:
    """Recorded on a CPU (one SM, as Liger counts it there) over two row counts: rows_per_program followed
    n_rows, and the grid had one program per SM; the forward kernels (grid = rows) are not marked."""
    from kbuild.record.machine import sm_dependent

    for kernel in liger_recording.kernels.values():
        for spec in kernel.specializations.values():
            marks = sm_dependent(spec.samples, spec.constexprs)
            if kernel.name == "_rms_norm_backward_kernel":
                assert "ceil(n_rows / sm_count)" in marks["rows_per_program"], marks
                assert marks["grid[0]"] == ["sm_count"]
                assert "BLOCK_SIZE" not in marks and "n_cols" not in marks  # equal in every call: not followed
                assert {s["sm_count"] for s in spec.samples} == {1} and len(spec.samples) == 2
            else:
                assert marks == {}, (kernel.name, marks)
    written = json.loads(fmt.dumps(liger_recording))  # and in the file
    (bwd,) = [k for k in written["kernels"] if k["name"] == "_rms_norm_backward_kernel"]
    assert all("ceil(n_rows / sm_count)" in s["sm_dependent"]["rows_per_program"] for s in bwd["specializations"])


# ----------------------------------------------------------------------------------------------
# Byte-identical recordings, merges, processes


def test_two_recordings_of_the_same_run_are_byte_identical_however_pytest_xdist_spreads_it(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("suite_for_xdist.py", "workload_jit.py"):
        shutil.copy(HERE / name, suite / name)
    (suite / "workload_jit.py").write_text((HERE / "workload_jit.py").read_text().replace(
        "Path(__file__).resolve().parents[2]", f"Path({str(ROOT)!r})"))
    (suite / "pytest.ini").write_text("[pytest]\n")
    outs = []
    for i, workers in enumerate(("2", "2", "0")):
        out = tmp_path / f"rec{i}.json"
        argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(suite / "pytest.ini"), "-n", workers,
                str(suite / "suite_for_xdist.py")]
        assert record(suite, out, *argv) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    rec = fmt.from_json(json.loads(outs[0]), where="rec0.json")
    assert sum(s.calls for k in rec.kernels.values() for s in k.specializations.values()) == 6
    assert b"/tmp" not in outs[0] and str(ROOT).encode() not in outs[0]  # no paths


def test_merge_is_the_recording_of_both_runs_and_record_appends(tmp_path: Path, capsys: Any) -> None:
    jit = str(HERE / "workload_jit.py")
    a, b, both = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "both.json"
    assert record(tmp_path, a, jit, "softmax:64") == 0
    assert record(tmp_path, b, jit, "softmax:128", "matmul:256") == 0
    assert record(tmp_path, both, jit, "softmax:64", "softmax:128", "matmul:256") == 0
    for order, name in (((a, b), "ab.json"), ((b, a), "ba.json")):
        assert main(["record", "--merge", *map(str, order), "--out", str(tmp_path / name)]) == 0
    appended = tmp_path / "appended.json"
    assert record(tmp_path, appended, jit, "softmax:64") == 0
    assert record(tmp_path, appended, jit, "softmax:128", "matmul:256") == 0  # added to the existing file
    texts = {p.name: p.read_bytes() for p in (tmp_path / "ab.json", tmp_path / "ba.json", appended, both)}
    assert len(set(texts.values())) == 1, list(texts)
    capsys.readouterr()
    assert main(["record", "--merge", str(a), str(a), "--out", str(tmp_path / "aa.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calls"] == 2 and doc["specializations"] == 1  # calls add up, specialisations unite
    replaced = tmp_path / "replaced.json"
    shutil.copy(both, replaced)
    assert record(tmp_path, replaced, jit, "softmax:64", args=("--replace",)) == 0
    assert replaced.read_bytes() == a.read_bytes()


def test_a_recording_keeps_the_smallest_samples_and_says_it_cut(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    calls = [f"softmax:{16 * i}" for i in range(1, 6)]
    assert record(tmp_path, out, str(HERE / "workload_jit.py"), *calls, args=("--samples", "3")) == 0
    rec = fmt.load(str(out))
    (spec,) = next(iter(rec.kernels.values())).specializations.values()
    assert spec.calls == 5 and len(spec.samples) == 3 and spec.samples_truncated
    orders = [fmt.sample_order(s) for s in spec.samples]
    assert orders == sorted(orders)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_children_are_recorded(tmp_path: Path, method: str) -> None:
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(HERE / "workload_mp.py"), method) == 0
    rec = fmt.load(str(out))
    (kernel,) = rec.kernels.values()
    (spec,) = kernel.specializations.values()
    assert spec.calls == 4  # three in pool workers (terminated by the with block), one in a Process
    assert sorted(s["args"]["in_ptr"]["shape"][0] for s in spec.samples) == [16, 32, 48, 64]


# ----------------------------------------------------------------------------------------------
# Autotuners, heuristics, and --mode gpu through Triton's hooks


def test_cpu_mode_records_every_config_heuristics_and_the_autotune_key(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(HERE / "workload_kernels.py")) == 0
    rec = fmt.load(str(out))
    by = {k.name: k for k in rec.kernels.values()}
    assert by["scale"].heuristics == {"EVEN_N": "outside"} and by["shift"].heuristics == {"HALF": "inside"}
    for name in ("scale", "shift"):
        specs = sorted(by[name].specializations.values(), key=lambda s: s.autotune_config or 0)
        assert [s.autotune_config for s in specs] == [0, 1]
        assert {t["choice"] for t in by[name].tunings} == {None}
        assert sorted(t["key"][0] for t in by[name].tunings) == [1024, 4096]
    assert {s.constexprs["HALF"] for s in by["shift"].specializations.values()} == {16, 32}
    assert all(s.heuristics == {"EVEN_N": True} for s in by["scale"].specializations.values())


def test_gpu_mode_through_tritons_hooks_records_what_cpu_mode_records(tmp_path: Path) -> None:
    """The same workload under ``--mode gpu`` (Triton's post-compile and launch hooks; a CPU stand-in driver that
    compiles for real and runs the launch hooks) and ``--mode cpu``: the same specialisations (same ids); the
    GPU run counts the workload's launches only (not the autotuner's benchmarking), records the autotuner's
    choice and the real grids, and marks rows_per_program = ceil(n_rows / 132)."""
    from kbuild.record import session

    script = str(HERE / "workload_kernels.py")
    gpu = session.run([PY, script, "--fake-gpu"], session.Options(mode="gpu")).recording
    cpu = session.run([PY, script], session.Options(mode="cpu", targets=(90,))).recording
    ids = {k.name: set(k.specializations) for k in gpu.kernels.values()}
    assert ids == {k.name: set(k.specializations) for k in cpu.kernels.values()}
    by = {k.name: k for k in gpu.kernels.values()}
    for name in ("scale", "shift"):
        assert all(t["choice"] == 1 and t["source"] == "measured" and t["sm_count"] == 132 and t["configs"] == [0, 1]
                   for t in by[name].tunings)
        calls = {s.autotune_config: s.calls for s in by[name].specializations.values()}
        assert calls[0] == 0 and calls[1] > 0  # the benchmarking launches of config 0 are not counted
    (rows,) = by["rows"].specializations.values()
    assert [s["grid"] for s in rows.samples] == [[132], [132]] and rows.calls == 2
    from kbuild.record.machine import sm_dependent

    marks = sm_dependent(rows.samples, rows.constexprs)
    assert marks["rows_per_program"] == ["ceil(n_rows / sm_count)", "ceil(x_ptr.shape[0] / sm_count)"]
    assert marks["grid[0]"] == ["sm_count"] and "n_rows" not in marks


def test_an_autotuners_choice_is_written_before_the_process_can_die(tmp_path: Path) -> None:
    """A process that ends right after an autotuned call without exiting (``os._exit``, as an xdist worker cut by a
    timeout's kill): the autotuner's measured choice of that last call is in the recording all the same (it is
    written as soon as it is known, not at the next launch or at exit; Liger's test_swiglu.py lost its last fused-MoE
    choices on the H100 that way)."""
    from kbuild.record import session

    script = str(HERE / "workload_kernels.py")
    rec = session.run([PY, script, "--fake-gpu", "--hard-exit"], session.Options(mode="gpu")).recording
    by = {k.name: k for k in rec.kernels.values()}
    assert sorted(t["key"][0] for t in by["shift"].tunings) == [1024, 4096]  # 4096: the very last call
    assert all(t["choice"] == 1 and t["source"] == "measured" for t in by["shift"].tunings)
    assert "rows" not in by  # the process did end there


def test_a_sitecustomize_the_command_had_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nopen(os.environ['MARK'], 'a').write('ran\\n')\n")
    monkeypatch.setenv("PYTHONPATH", str(own))
    monkeypatch.setenv("MARK", str(tmp_path / "mark"))
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(HERE / "workload_jit.py"), "softmax:64") == 0
    assert (tmp_path / "mark").read_text() == "ran\n"
    assert len(fmt.load(str(out)).kernels) == 1


# ----------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.hostile(fault="bad command to record", outcome="clean error")
@pytest.mark.parametrize("argv, named", [
    (["record", "--mode", "cpu"], "no command given"),
    (["record", "--mode", "cpu", "--", "no-such-program-kbuild"], "no-such-program-kbuild"),
    (["record", "--mode", "cpu", "--", "./not-here.py"], "not-here.py"),
    (["record", "--mode", "cpu", "--target", "sm90", "--", PY, "-c", "pass"], "--target"),
    (["record", "--mode", "cpu", "--samples", "0", "--", PY, "-c", "pass"], "--samples"),
    (["record", "--mode", "cpu", "--sm-count", "nan", "--", PY, "-c", "pass"], "--sm-count"),
    (["record", "--merge", "a.json"], "--merge needs --out"),
    (["record", "--merge", "a.json", "--out", "c.json", "--", PY], "--merge takes recordings"),
    (["record", "--mode", "gpu", "--", PY, "-c", "pass"], "--mode gpu"),
])
def test_bad_input_is_one_clean_error_and_nothing_is_written(tmp_path: Path, capsys: Any, argv: list[str],
                                                            named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import kbuild.device.probe as probe

    monkeypatch.setattr(probe, "local_gpus", lambda: ())  # --mode gpu on a machine without a GPU
    monkeypatch.chdir(tmp_path)
    before = tree_digest(tmp_path)
    code = main(argv)
    assert_clean_error(code, capsys.readouterr().err, names=[named])
    assert tree_digest(tmp_path) == before


@pytest.mark.hostile(fault="bad output path", outcome="clean error")
@pytest.mark.parametrize("where", ["directory", "under-a-file", "fifo"])
def test_an_unwritable_out_is_refused_before_the_command_runs(tmp_path: Path, capsys: Any, where: str) -> None:
    import os

    marker = tmp_path / "ran"
    target = {"directory": tmp_path / "adir", "under-a-file": tmp_path / "afile" / "rec.json",
              "fifo": tmp_path / "fifo"}[where]
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    code = main(["record", "--mode", "cpu", "--out", str(target), "--", PY, "-c",
                 f"open({str(marker)!r}, 'w').write('ran')"])
    assert_clean_error(code, capsys.readouterr().err, names=["--out"])
    assert not marker.exists()


@pytest.mark.hostile(fault="malformed recording", outcome="clean error")
@pytest.mark.parametrize("content, named", [
    (b"{not json", "not valid JSON"),
    (b'{"format": "something-else"}', "format"),
    (json.dumps({"format": "kbuild-recording", "version": 2, "samples_per_specialization": 8,
                 "compiler_options": {}, "kernels": []}).encode(), "version 2 is not supported"),
    (json.dumps({"format": "kbuild-recording", "version": 1, "samples_per_specialization": 8,
                 "compiler_options": {}, "kernels": [{"module": "m"}]}).encode(), "kernels[0]"),
])
def test_a_file_that_is_not_a_recording_is_named_and_left_alone(tmp_path: Path, capsys: Any, content: bytes,
                                                                named: str) -> None:
    bad = tmp_path / "rec.json"
    bad.write_bytes(content)
    marker = tmp_path / "ran"
    code = main(["record", "--mode", "cpu", "--out", str(bad), "--", PY, "-c",
                 f"open({str(marker)!r}, 'w').write('ran')"])
    err = capsys.readouterr().err
    assert_clean_error(code, err, names=[str(bad), named, "--replace"])
    assert bad.read_bytes() == content and not marker.exists()
    code = main(["record", "--merge", str(bad), "--out", str(tmp_path / "c.json")])
    assert_clean_error(code, capsys.readouterr().err, names=[str(bad), named])
    assert not (tmp_path / "c.json").exists()


def test_an_edited_specialisation_is_refused(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(HERE / "workload_jit.py"), "softmax:64") == 0
    doc = json.loads(out.read_text())
    doc["kernels"][0]["specializations"][0]["constexprs"]["BLOCK"] = 2048
    out.write_text(json.dumps(doc))
    capsys.readouterr()
    code = main(["record", "--merge", str(out), "--out", str(tmp_path / "c.json")])
    assert_clean_error(code, capsys.readouterr().err, names=["kernels[0].specializations[0].id", "edited by hand"])


def test_a_failing_command_is_recorded_up_to_where_it_stopped_and_exits_1(tmp_path: Path, capsys: Any) -> None:
    script = tmp_path / "fails.py"
    script.write_text(f"import runpy, sys\nsys.argv = ['w', 'softmax:64']\n"
                      f"runpy.run_path({str(HERE / 'workload_jit.py')!r}, run_name='__main__')\nsys.exit(3)\n")
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, str(script)) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "exited with status 3" in err and "Traceback" not in err
    assert len(fmt.load(str(out)).kernels) == 1


def test_a_command_that_launches_nothing_says_so(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "rec.json"
    assert record(tmp_path, out, "-c", "print('hello')") == 0
    assert "no Triton launch was recorded" in " ".join(capsys.readouterr().err.split())
    assert fmt.load(str(out)).kernels == {}


def test_json_output_is_one_document_and_the_commands_stdout_goes_to_stderr(tmp_path: Path, capfd: Any) -> None:
    out = tmp_path / "rec.json"
    code = record(tmp_path, out, str(HERE / "workload_jit.py"), "softmax:64", args=("--json",))
    assert code == 0
    captured = capfd.readouterr()
    doc = json.loads(captured.out)
    assert doc["kernels"] == 1 and doc["run"]["status"] == 0 and doc["run"]["processes"] == 1


def test_a_python_that_cannot_import_kbuild_is_named(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "rec.json"
    code = record(tmp_path, out, "-c", "import sys; sys.modules['kbuild'] = None; import triton")
    assert code == 0
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "could not import kbuild" in err and "its launches were not recorded" in err
