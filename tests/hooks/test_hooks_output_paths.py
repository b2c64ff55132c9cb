"""Output paths given on the command line (issue 13): ``emit --out-dir`` (also with ``--from-manifest``),
``package-data --out`` and ``compile --out``.

A path that is a file, lies under a file, or cannot be written (``/proc``: permission bits do not stop
root, who runs these tests) is one ``error:`` line naming the option and the path, exit 2, checked
before any work, and nothing is written anywhere. A failure while writing leaves the old files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hooks_helpers import CMAKE_EXAMPLE
from hostile_helpers import assert_clean_error, tree_digest

from kbuild import fsutil
from kbuild.cli import main
from kbuild.errors import UsageError
from kbuild.settings.variables import Override

JIT_EXAMPLE = CMAKE_EXAMPLE.parent / "jit-package"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def bad_path(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A bad output path of ``kind`` and what the error says about it."""
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    if kind == "file":
        return afile, "exists and is not a directory"
    if kind == "under-file":
        return afile / "sub" / "dir", f"{afile} is not a directory"
    if kind == "proc":
        return Path("/proc/kbuild-test-out"), "cannot write there"
    raise AssertionError(kind)


KINDS = [pytest.param(k, id=k, marks=pytest.mark.hostile(fault="bad output path", outcome="clean error"))
         for k in ("file", "under-file", "proc")]


@pytest.mark.parametrize("kind", KINDS)
def test_emit_out_dir(tmp_path: Path, capsys, kbuild_env: Override, kind: str):
    store = tmp_path / "store"
    kbuild_env.set(store=store)
    out, says = bad_path(tmp_path, kind)
    before = tree_digest(tmp_path)
    code, stdout, err = run(capsys, "emit", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out-dir", str(out))
    assert_clean_error(code, err, names=[f"--out-dir {out}: ", says])
    assert err.count("\n") == 1 and stdout == ""
    assert tree_digest(tmp_path) == before and not store.exists()  # checked before the pipeline ran


@pytest.mark.parametrize("kind", KINDS)
def test_emit_from_manifest_out_dir(tmp_path: Path, capsys, kbuild_env: Override, kind: str):
    kbuild_env.set(store=tmp_path / "store")
    manifest = tmp_path / "kbuild.json"
    manifest.write_text(json.dumps({"format": "kbuild-manifest/1", "kernels": []}))
    out, says = bad_path(tmp_path, kind)
    before = tree_digest(tmp_path)
    code, _, err = run(capsys, "emit", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out-dir", str(out),
                       "--from-manifest", str(manifest))
    assert_clean_error(code, err, names=[f"--out-dir {out}: ", says])
    assert tree_digest(tmp_path) == before and not (tmp_path / "store").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_package_data_out(tmp_path: Path, capsys, kbuild_env: Override, kind: str):
    kbuild_env.set(store=tmp_path / "store")
    out, says = bad_path(tmp_path, kind)
    before = tree_digest(tmp_path)
    code, _, err = run(capsys, "package-data", "--config", str(JIT_EXAMPLE / "pyproject.toml"), "--out", str(out))
    assert_clean_error(code, err, names=[f"--out {out}: ", says])
    assert tree_digest(tmp_path) == before and not (tmp_path / "store").exists()


@pytest.mark.hostile(fault="bad output path", outcome="clean error")
def test_package_data_out_whose_data_folder_is_a_file(tmp_path: Path, capsys, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "_kbuild").write_text("not a folder\n")
    before = tree_digest(tmp_path)
    code, _, err = run(capsys, "package-data", "--config", str(JIT_EXAMPLE / "pyproject.toml"), "--out", str(out))
    assert_clean_error(code, err, names=[f"--out {out}: {out / '_kbuild'} exists and is not a directory"])
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("kind", KINDS)
def test_compile_out(tmp_path: Path, capsys, kbuild_env: Override, kind: str):
    store = tmp_path / "store"
    kbuild_env.set(store=store)
    out, says = bad_path(tmp_path, kind)
    before = tree_digest(tmp_path)
    code, _, err = run(capsys, "compile", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out", str(out),
                       "--no-progress")
    assert_clean_error(code, err, names=[f"--out {out}: ", says])
    assert tree_digest(tmp_path) == before and not store.exists()  # checked before compiling


# ---- the helpers ---------------------------------------------------------------------------------------------

def test_check_output_dir_accepts_a_directory_or_a_new_path_and_creates_nothing(tmp_path: Path):
    assert fsutil.check_output_dir(tmp_path, "--out") == tmp_path
    assert fsutil.check_output_dir(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []  # the probe is gone, nothing created
    with pytest.raises(UsageError, match=r"^--out: empty path$"):
        fsutil.check_output_dir("", "--out")


@pytest.mark.hostile(fault="bad output path", outcome="clean error")
def test_emit_write_that_fails_half_way_replaces_nothing(tmp_path: Path):
    """kbuild emit writes .c, .h and kbuild.json through fsutil.write_files: all three or none."""
    old = {"kbuild.json": b"old json", "kbuild_kernels.c": b"old c"}
    for name, data in old.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "kbuild_kernels.h").mkdir()  # the one rename that would fail
    new = {"kbuild.json": b"new", "kbuild_kernels.c": b"new", "kbuild_kernels.h": b"new"}
    with pytest.raises(UsageError, match=rf"^--out-dir {tmp_path}: cannot write {tmp_path / 'kbuild_kernels.h'}: "):
        fsutil.write_files(tmp_path, new, what=f"--out-dir {tmp_path}")
    assert {n: (tmp_path / n).read_bytes() for n in old} == old
    assert sorted(os.listdir(tmp_path)) == ["kbuild.json", "kbuild_kernels.c", "kbuild_kernels.h"]


def test_write_files_removes_the_directories_it_created_when_a_write_fails(tmp_path: Path, monkeypatch):
    real = os.replace

    def full(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(UsageError, match="No space left on device"):
        fsutil.write_files(tmp_path / "a" / "b", {"x": b"1", "y": b"2"}, what="--out-dir a/b")
    monkeypatch.setattr(os, "replace", real)
    assert list(tmp_path.iterdir()) == []
    assert fsutil.write_files(tmp_path / "a", {"x": "é"}) == [tmp_path / "a" / "x"]
    assert (tmp_path / "a" / "x").read_bytes() == "é".encode()
