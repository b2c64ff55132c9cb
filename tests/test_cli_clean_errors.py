"""Garbage on the command line gives one ``error:`` line, exit status 2 and nothing written (issue 32, item 7).

The cases the issue's sweep found: a file argument that is ``/dev/zero`` (read until memory ran out) or a FIFO
(blocked forever), a 4,000-character name (``OSError: File name too long``), ``kbuild lock --lock-file <dir>``,
``kbuild tune --out <file>``, ``--seed -1``, a kernel module that calls ``sys.exit(0)`` at import (``kbuild
compile --json`` exited 0 with nothing on stdout), ``-o`` naming a device or a FIFO (replaced by a file when
run as root), and the CLI's own handler: an ``OSError`` about a path the user gave is a clean error, any
other one keeps its traceback. ``benchmarks/cli_sweep.py`` sweeps every option; ``test_sweep_sample`` runs a
bounded sample of it here.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import assert_clean_error, tree_digest
from script_helpers import load_benchmark

from kbuild.cli import main
from kbuild.settings.variables import Override, variables

KEY = "a" * 64


def kbuild(argv: list[str], cwd: Path, *, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python -m kbuild *argv`` under a 2 GiB address-space limit (so that reading /dev/zero fails in seconds,
    not after the machine's memory) and a timeout (a FIFO opened for reading blocks forever)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = dict(os.environ)  # no KBUILD_* setting but those a test sets (conftest.py)
    env["KBUILD_STORE"] = str(cwd / "store")
    return subprocess.run([sys.executable, "-m", "kbuild", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, check=False)


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A directory with a FIFO, a link to /dev/zero, a directory and a file (no project: every case fails on its
    argument before a project is needed)."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "pyproject.toml").write_text("[tool.kbuild]\ntargets = ['sm_90']\n")
    return tmp_path


#: (argv with {bad} for the garbage path, what the error names, the garbage each case gets: those the code before
#: issue 32 failed on; a directory was refused cleanly by most readers already)
FILE_ARGUMENTS = [
    (["compile", "--config", "{bad}"], "{bad}", ["zero", "fifo"]),
    (["lock", "--lock-file", "{bad}"], "--lock-file", ["fifo", "adir"]),  # written: a link there is replaced
    (["cache", "put", "--key", KEY, "--cubin", "afile", "--meta", "{bad}"], "{bad}", ["zero", "fifo"]),
    (["cache", "put", "--key", KEY, "--cubin", "{bad}"], "{bad}", ["zero", "fifo"]),
    (["inspect", "{bad}"], "{bad}", ["zero", "fifo"]),
    (["emit", "--out-dir", "out", "--from-manifest", "{bad}"], "{bad}", ["fifo"]),
    (["cache", "import", "{bad}"], "{bad}", ["zero", "fifo", "adir"]),
]


@pytest.mark.hostile(fault="device or FIFO as a file argument", outcome="clean error")
@pytest.mark.parametrize(("argv", "named", "bad"), [pytest.param(argv, named, bad, id=f"{' '.join(argv[:2])}-{bad}")
                                                    for argv, named, bads in FILE_ARGUMENTS for bad in bads])
def test_dev_zero_fifo_or_directory_as_a_file_is_one_clean_error(sandbox: Path, argv: list[str], named: str,
                                                                bad: str) -> None:
    before = tree_digest(sandbox / "adir")
    proc = kbuild([a.replace("{bad}", str(sandbox / bad)) for a in argv], sandbox)
    assert_clean_error(proc.returncode, proc.stderr, names=[named.replace("{bad}", str(sandbox / bad))])
    assert "MemoryError" not in proc.stderr
    assert not (sandbox / "store").exists() and not (sandbox / "out").exists()  # nothing written
    assert tree_digest(sandbox / "adir") == before


LONG = "n" * 4000


@pytest.mark.hostile(fault="file name too long", outcome="clean error")
@pytest.mark.parametrize(("argv", "named"), [
    (["compile", "--out", LONG], "--out"),
    (["lock", "--lock-file", LONG], "--lock-file"), (["cache", "ls", "--store", LONG], "--store"),
    (["cache", "export", LONG], "FILE"), (["cache", "get", KEY, "-o", LONG], LONG[:20]),
    (["inspect", LONG], LONG[:20]), (["emit", "--out-dir", "o", "--from-manifest", LONG], LONG[:20]),
    (["package-data", "--out", LONG], "--out"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_a_name_too_long_is_one_clean_error(sandbox: Path, argv: list[str], named: str,
                                            capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kbuild_env: Override) -> None:
    monkeypatch.chdir(sandbox)
    kbuild_env.set(store=sandbox / "store")
    (sandbox / "pyproject.toml").write_text("[tool.kbuild]\ntargets = ['sm_90']\n[[tool.kbuild.kernels]]\n"
                                            "name = 'k'\nsource = 'nope:k'\nsignature = { n = 'i32' }\n")
    code = main(argv)
    err = capsys.readouterr().err
    assert_clean_error(code, err, names=[named])
    assert "File name too long" in err
    assert len(err) < 1000  # the name is shortened where the message repeats it
    assert not (sandbox / "store").exists()


@pytest.mark.hostile(fault="directory where a file is written", outcome="clean error")
def test_lock_file_that_is_a_directory_is_refused_before_any_work(sandbox: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(sandbox)
    (sandbox / "pyproject.toml").write_text("[tool.kbuild]\ntargets = ['sm_90']\n[[tool.kbuild.kernels]]\n"
                                            "name = 'k'\nsource = 'nope:k'\nsignature = { n = 'i32' }\n")
    code = main(["lock", "--lock-file", str(sandbox / "adir")])
    assert_clean_error(code, capsys.readouterr().err, names=["--lock-file", "is a directory"])
    code = main(["lock", "--lock-file", str(sandbox / "afile" / "kbuild.lock")])
    assert_clean_error(code, capsys.readouterr().err, names=["--lock-file", "not a directory"])


@pytest.mark.hostile(fault="file where a directory is written", outcome="clean error")
def test_tune_out_that_is_a_file_is_refused_before_the_search(sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", "--suite", "--only", "softmax", "--backend", "model", "--budget-evals", "1",
                 "--out", str(sandbox / "afile")])
    assert_clean_error(code, capsys.readouterr().err, names=["--out", "exists and is not a directory"])
    assert (sandbox / "afile").read_text() == "x\n"


@pytest.mark.hostile(fault="bad number on the command line", outcome="clean error")
@pytest.mark.parametrize(("flag", "value", "fragment"), [
    ("--seed", "-1", "expected a seed from 0 to 2,147,483,647"), ("--seed", str(2**40), "got 1099511627776"),
    ("--budget-seconds", "nan", "non-finite"), ("--budget-seconds", "inf", "non-finite"),
    ("--total-seconds", "nan", "must be positive and finite"),
    ("--horizon", "0", "at least 1"), ("--jobs", "-1", "at least 1"),
])
def test_tune_numbers_are_checked_by_the_settings_rules(flag: str, value: str, fragment: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", "--suite", "--only", "softmax", "--backend", "model", f"{flag}={value}"])
    assert_clean_error(code, capsys.readouterr().err, names=[flag, fragment])


@pytest.mark.hostile(fault="bad environment variable", outcome="clean error")
@pytest.mark.parametrize(("var", "raw", "fragment"), [
    ("KBUILD_TUNE", "sometimes", "expected one of"), ("KBUILD_TARGETS", "sm_90,sm90", "did you mean 'sm_90'"),
    ("KBUILD_SEED", "-1", "expected a seed"), ("KBUILD_DEBUG", "x", "expected a boolean"),
    ("KBUILD_BUDGET_SECONDS", "nan", "non-finite"),
])
def test_a_bad_variable_is_named_once(var: str, raw: str, fragment: str, sandbox: Path,
                                      capsys: pytest.CaptureFixture[str], kbuild_env: Override) -> None:
    kbuild_env.set({field: raw for field, name in variables().items() if name == var})
    code = main(["compile", "--config", str(sandbox / "pyproject.toml")])
    err = capsys.readouterr().err
    assert_clean_error(code, err, names=[f"error: environment variable {var}", fragment])
    assert err.count(var) == 1, err  # was "environment variable KBUILD_TUNE: KBUILD_TUNE: ..."


@pytest.mark.hostile(fault="kernel module exits at import", outcome="clean error")
@pytest.mark.parametrize("statement", ["import sys\nsys.exit(0)", "raise SystemExit(3)", "import sys\nsys.exit('bye')",
                                       "def f():\n    return f()\nf()"])
def test_a_kernel_module_that_exits_or_recurses_at_import_is_one_clean_error(statement: str, tmp_path: Path) -> None:
    pkg = tmp_path / "exitpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.py").write_text(statement + "\n")
    (tmp_path / "pyproject.toml").write_text(
        "[tool.kbuild]\ntargets = ['sm_90']\n[[tool.kbuild.kernels]]\nname = 'k'\nsource = 'exitpkg.kernels:k'\n"
        "signature = { n = 'i32' }\n")
    proc = kbuild(["compile", "--json"], tmp_path)
    assert proc.stdout == ""
    assert_clean_error(proc.returncode, proc.stderr, names=["[tool.kbuild.kernels][0].source", "'exitpkg.kernels'",
                                                            "kernels.py, line"])
    assert not (tmp_path / "store").exists()


@pytest.mark.hostile(fault="device or FIFO as an output file", outcome="clean error")
def test_an_output_file_that_is_a_fifo_or_device_is_not_replaced(sandbox: Path) -> None:
    # (a FIFO stands for a device: this test must be safe to run on the code before the fix, which replaced
    # whatever it was given, /dev/null or /dev/zero too when run as root)
    from kbuild.fsutil import write_atomic

    with pytest.raises(OSError, match="not a file: kbuild replaces only files"):
        write_atomic(sandbox / "fifo", b"data")
    assert (sandbox / "fifo").is_fifo()
    proc = kbuild(["tile", "kbuild.tile.kernels:softmax_tile", "--block", "N=64", "--write", str(sandbox / "fifo")],
                  sandbox)
    assert_clean_error(proc.returncode, proc.stderr, names=["--write", "a FIFO"])
    assert (sandbox / "fifo").is_fifo()


@pytest.mark.hostile(fault="OSError about a path on the command line", outcome="clean error")
def test_the_handler_reports_oserrors_about_user_paths_and_keeps_other_tracebacks(
        sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import kbuild.commands.inspect as inspect_cmd

    def raise_about(path: str) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(inspect_cmd, "run", lambda args: raise_about(os.path.join(args.wheel, "member")))
    sub = sandbox / "w.whl"
    assert main(["inspect", str(sub)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: WHEEL {sub}: Permission denied ({sub}/member)\n"
    monkeypatch.setattr(inspect_cmd, "run", lambda args: raise_about("/var/lib/kbuild-internal"))
    with pytest.raises(PermissionError):  # not about the user's path: a bug, and it keeps its traceback
        main(["inspect", str(sub)])


@pytest.mark.slow  # about 20 s on 2 cores: 170 runs and 26 base runs, forked
@pytest.mark.hostile(fault="garbage on the command line", outcome="clean error")
def test_sweep_sample(tmp_path: Path) -> None:
    """A bounded sample of ``benchmarks/cli_sweep.py``: every verb's base run, and every option of every verb
    with one garbage value (rotating through them), forked from this process. All must hold."""
    sweep = load_benchmark("cli_sweep")
    doc = sweep.sweep(sample=True, timeout=30, progress=False, root=tmp_path)
    failures = [(" ".join(f["argv"])[:200], f["problems"], f["stderr_tail"][-300:]) for f in doc["failures"]]
    assert not failures, json.dumps(failures, indent=1)
    assert doc["runs"] >= doc["options"] - 10 and doc["verbs"] >= 25


def test_a_written_file_whose_name_is_not_utf8_is_reported_without_a_traceback(tmp_path: Path) -> None:
    """Found by the sweep: ``kbuild tile ... --write $'\\xff\\xfe.py'`` wrote the file, then printed its name to
    stdout, which cannot encode it (UnicodeEncodeError)."""
    name = os.fsdecode(b"\xff\xfe.py")
    proc = kbuild(["tile", "kbuild.tile.kernels:softmax_tile", "--block", "N=64", "--warps", "4", "--write", name],
                  tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / name).read_text().startswith('"""softmax_tile')
