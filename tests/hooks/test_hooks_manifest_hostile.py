"""Untrusted wheel manifests (``*.dist-info/kbuild.json``) and the commands that read them (issue 13).

``kbuild inspect WHEEL|kbuild.json``, ``kbuild verify-wheel`` and ``kbuild emit --from-manifest`` read a
manifest someone else made. Whatever it holds (nesting 100,000 deep, a key that is a number, 300 MB,
terminal escape sequences), the answer is one ``error:`` line naming the file and the key, exit 2,
nothing written, and bounded memory; a table never passes escape sequences to the terminal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import CMAKE_EXAMPLE
from hostile_helpers import assert_clean_error, tree_digest

from kbuild.build.manifest import MANIFEST_FORMAT, MAX_MANIFEST_BYTES, check_manifest
from kbuild.cli import main
from kbuild.settings.variables import Override

ENTRY = {"kernel": "softmax", "target": "sm_90", "arch": "sm_90a", "key": "a" * 64, "baseline_key": "c" * 64,
         "cubin_sha256": "b" * 64, "cubin_bytes": 6432, "symbol": "softmax", "source": "pkg.mod:softmax",
         "state": "tuned", "speedup": 1.25}
DIST_INFO = "demo-0.1.0.dist-info"


def manifest(**entry: Any) -> dict[str, Any]:
    return {"format": MANIFEST_FORMAT, "kbuild_version": "0.1.0", "tune": "auto", "kernels": [{**ENTRY, **entry}]}


def write_wheel(path: Path, data: bytes, *, name: str = f"{DIST_INFO}/kbuild.json") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("demo/__init__.py", "")
        zf.writestr(name, data)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


NESTED = b'{"format": "kbuild-manifest/1", "kernels": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
NESTED_TOP = b"[" * 100_000 + b"]" * 100_000


# ---- the shape, checked in one place -------------------------------------------------------------------------

def shape(doc: Any, key: str, fragment: str, id: str) -> Any:
    return pytest.param(doc, key, fragment, id=id,
                        marks=pytest.mark.hostile(fault="malformed wheel manifest", outcome="clean error"))


SHAPES = [
    shape(manifest(key=7), "kernels[0].key", "expected a string, got an integer", "key-int"),
    shape(manifest(cubin_bytes="6432"), "kernels[0].cubin_bytes", "expected a byte count", "cubin_bytes-str"),
    shape(manifest(cubin_bytes=-1), "kernels[0].cubin_bytes", "expected a byte count", "cubin_bytes-negative"),
    shape(manifest(cubin_bytes=True), "kernels[0].cubin_bytes", "got a boolean", "cubin_bytes-bool"),
    shape(manifest(key="A" * 64), "kernels[0].key", "64 lowercase hex digits", "key-not-hex"),
    shape(manifest(cubin_sha256=None), "kernels[0].cubin_sha256", "got null", "sha-null"),
    shape(manifest(kernel=["k"]), "kernels[0].kernel", "got a list", "kernel-list"),
    shape(manifest(kernel="a b"), "kernels[0].kernel", "is not a kernel name", "kernel-not-identifier"),
    shape(manifest(target="sm_00"), "kernels[0].target", "is not a GPU target", "target-bogus"),
    shape(manifest(target={"x": 1}), "kernels[0].target", "got a table", "target-table"),
    shape(manifest(state="shipped"), "kernels[0].state", "not one of tuned, baseline, baseline-kept", "state"),
    shape(manifest(speedup="fast"), "kernels[0].speedup", "expected a positive number", "speedup-str"),
    shape(manifest(source=1), "kernels[0].source", "expected a string", "source-int"),
    shape({**manifest(), "kernels": {"a": 1}}, "kernels", "expected a list, got a table", "kernels-table"),
    shape({**manifest(), "kernels": [1]}, "kernels[0]", "expected a table, got an integer", "entry-int"),
    shape({**manifest(), "kernels": [{"kernel": "k"}]}, "kernels[0].target", "missing", "entry-missing"),
    shape({**manifest(), "kernels": [ENTRY, ENTRY]}, "kernels[1]", "listed twice", "duplicate"),
    shape({**manifest(), "format": "other/1"}, "format", "not a kbuild manifest", "format"),
    shape({**manifest(), "tune": ["auto"]}, "tune", "expected a string", "tune-list"),
    shape([1, 2], "", "not a kbuild manifest", "top-list"),
]


@pytest.mark.parametrize(("doc", "key", "fragment"), SHAPES)
def test_inspect_wheel_with_malformed_manifest_is_a_clean_error(tmp_path: Path, capsys, doc: Any, key: str,
                                                                fragment: str):
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", json.dumps(doc).encode())
    code, out, err = run(capsys, "inspect", str(wheel))
    assert_clean_error(code, err, names=[f"{wheel}!{DIST_INFO}/kbuild.json: {key}".rstrip(": "), fragment])
    assert err.count("\n") == 1 and out == ""


def test_a_valid_manifest_passes_the_shape_check():
    doc = manifest()
    assert check_manifest(doc, "x") is doc
    assert check_manifest({**manifest(), "kernels": [{**ENTRY, "speedup": None, "symbol": None,
                                                      "state": "baseline-kept"}]}, "x")


@pytest.mark.hostile(fault="deeply nested JSON", outcome="clean error")
@pytest.mark.parametrize("data", [NESTED, NESTED_TOP], ids=["in-kernels", "top-level"])
def test_inspect_wheel_with_deeply_nested_manifest(tmp_path: Path, capsys, data: bytes):
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", data)
    code, _, err = run(capsys, "inspect", str(wheel))
    assert_clean_error(code, err, names=[f"{wheel}!{DIST_INFO}/kbuild.json", "nested deeper than"])


@pytest.mark.hostile(fault="deeply nested JSON", outcome="clean error")
def test_inspect_manifest_file_deeply_nested(tmp_path: Path, capsys):
    path = tmp_path / "kbuild.json"
    path.write_bytes(NESTED)
    code, _, err = run(capsys, "inspect", str(path))
    assert_clean_error(code, err, names=[str(path), "nested deeper than"])


@pytest.mark.hostile(fault="malformed wheel manifest", outcome="clean error")
def test_inspect_manifest_file_with_int_key(tmp_path: Path, capsys):
    path = tmp_path / "kbuild.json"
    path.write_text(json.dumps(manifest(key=12)))
    code, _, err = run(capsys, "inspect", str(path))
    assert_clean_error(code, err, names=[f"{path}: kernels[0].key: expected a string, got an integer"])


@pytest.mark.hostile(fault="bad input path", outcome="clean error")
@pytest.mark.parametrize("suffix", ["", ".whl", ".json"])
def test_inspect_a_directory_is_a_clean_error(tmp_path: Path, capsys, suffix: str):
    d = tmp_path / f"dir{suffix}"
    d.mkdir()
    code, _, err = run(capsys, "inspect", str(d))
    assert_clean_error(code, err, names=[str(d), "is a directory"])


@pytest.mark.hostile(fault="malformed wheel manifest", outcome="clean error")
def test_inspect_wheel_with_a_corrupt_manifest_member(tmp_path: Path, capsys):
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", json.dumps(manifest()).encode() * 50)
    data = bytearray(wheel.read_bytes())
    start = data.index(b"PK\x03\x04", data.index(b"PK\x03\x04") + 4)  # the manifest's local header
    name_len = int.from_bytes(data[start + 26:start + 28], "little")
    body = start + 30 + name_len
    data[body + 5:body + 25] = b"\xff" * 20  # damage the deflated bytes
    wheel.write_bytes(bytes(data))
    code, _, err = run(capsys, "inspect", str(wheel))
    assert_clean_error(code, err, names=[f"{wheel}!{DIST_INFO}/kbuild.json"])


# ---- size: checked before reading -----------------------------------------------------------------------------

# Runs ``python -m kbuild`` in this interpreter and, at exit, writes the process's VmHWM (peak RSS, kB) to
# argv[1]. VmHWM belongs to the address space made by exec, so it is this child's own peak. ru_maxrss from
# os.wait4 is not: Linux folds the pre-exec address space (this pytest process, hundreds of MiB once an
# earlier test has imported torch) into it at exec.
PEAK_RSS_WRAPPER = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def report():
    with open("/proc/self/status") as status:
        kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(out, "w") as f:
        f.write(kb)
atexit.register(report)
sys.argv[0] = "kbuild"
runpy.run_module("kbuild", run_name="__main__", alter_sys=True)
"""


def child_peak_rss_mib(argv: list[str], stderr: Path) -> tuple[int, float]:
    """Run ``python -m kbuild *argv``; its exit status and its own peak RSS in MiB (VmHWM at exit)."""
    peak = stderr.with_name(stderr.name + ".vmhwm")
    with stderr.open("wb") as err:
        proc = subprocess.run([sys.executable, "-c", PEAK_RSS_WRAPPER, str(peak), *argv],
                              stdout=subprocess.DEVNULL, stderr=err, check=False)
    return proc.returncode, int(peak.read_text()) / 1024


@pytest.mark.hostile(fault="oversized manifest", outcome="clean error")
def test_a_300_mb_wheel_manifest_is_refused_before_it_is_read(tmp_path: Path):
    wheel = tmp_path / "demo-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("demo/__init__.py", "")
        with zf.open(f"{DIST_INFO}/kbuild.json", "w", force_zip64=True) as f:
            f.write(b'{"format": "kbuild-manifest/1", "kernels": [], "pad": "')
            for _ in range(300):
                f.write(b" " * 2**20)
            f.write(b'"}')
    assert wheel.stat().st_size < 5 * 2**20  # 300 MB of spaces deflate to little
    code, rss = child_peak_rss_mib(["inspect", str(wheel)], tmp_path / "err")
    err = (tmp_path / "err").read_text()
    assert_clean_error(code, err, names=[f"{wheel}!{DIST_INFO}/kbuild.json", "over the 16,777,216-byte limit"])
    assert rss < 150, f"peak RSS {rss:.0f} MiB"  # reading it whole took about 640 MiB


@pytest.mark.hostile(fault="oversized manifest", outcome="clean error")
def test_an_oversized_manifest_file_is_refused(tmp_path: Path, capsys):
    path = tmp_path / "kbuild.json"
    with path.open("wb") as f:  # sparse: the reader must stop after the limit
        f.truncate(MAX_MANIFEST_BYTES + 1)
    code, _, err = run(capsys, "inspect", str(path))
    assert_clean_error(code, err, names=[str(path), "limit"])


# ---- terminal escapes -----------------------------------------------------------------------------------------

ESCAPES = {"arch": "sm_90a\x1b]0;owned\x07\x1b[2J\x1b[31m", "source": "pkg.mod:k\r\x1b[1Aevil\u202e[/x]"}


@pytest.mark.hostile(fault="terminal escapes in manifest", outcome="served correct bytes")
def test_inspect_strips_terminal_escapes_from_the_table(tmp_path: Path, capsys):
    doc = {**manifest(arch=ESCAPES["arch"]), "kbuild_version": "0.1\x1b[5m\x9b2J", "tune": "auto\x1bP1$q\x1b\\"}
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", json.dumps(doc).encode())
    code, out, err = run(capsys, "inspect", str(wheel))
    assert code == 0, err
    assert not any(c in err for c in "\x1b\x9b\x07\r\u202e"), repr(err)
    assert "sm_90a" in err and "softmax" in err and "×1.250" in err
    # --json keeps the strings, JSON-escaped
    code, out, err = run(capsys, "inspect", str(wheel), "--json")
    assert code == 0 and "\x1b" not in out and "\\u001b" in out
    assert json.loads(out)["kernels"][0]["arch"] == ESCAPES["arch"]


@pytest.mark.hostile(fault="terminal escapes in manifest", outcome="served correct bytes")
def test_rich_markup_in_a_manifest_is_shown_as_text(tmp_path: Path, capsys):
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", json.dumps(manifest(arch="[/x][bold]a")).encode())
    code, _, err = run(capsys, "inspect", str(wheel))
    assert code == 0, err
    assert "[/x][bold]a" in err


# ---- verify-wheel and emit --from-manifest read the same way -------------------------------------------------

@pytest.mark.hostile(fault="deeply nested JSON", outcome="clean error")
def test_verify_wheel_checks_the_manifest_before_rebuilding(tmp_path: Path, capsys):
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", NESTED)
    code, _, err = run(capsys, "verify-wheel", str(wheel), "--project", str(CMAKE_EXAMPLE))
    assert_clean_error(code, err, names=[f"{wheel}!{DIST_INFO}/kbuild.json", "nested deeper than"])


@pytest.mark.hostile(fault="malformed wheel manifest", outcome="clean error")
def test_verify_wheel_with_an_int_key(tmp_path: Path, capsys):
    wheel = write_wheel(tmp_path / "demo-0.1.0-py3-none-any.whl", json.dumps(manifest(key=1)).encode())
    code, _, err = run(capsys, "verify-wheel", str(wheel), "--project", str(CMAKE_EXAMPLE))
    assert_clean_error(code, err, names=[f"{wheel}!{DIST_INFO}/kbuild.json: kernels[0].key"])


@pytest.mark.hostile(fault="bad input path", outcome="clean error")
def test_verify_wheel_of_a_directory(tmp_path: Path, capsys):
    code, _, err = run(capsys, "verify-wheel", str(tmp_path), "--project", str(CMAKE_EXAMPLE))
    assert_clean_error(code, err, names=[str(tmp_path), "is a directory"])


@pytest.mark.parametrize(("data", "fragment"), [
    pytest.param(NESTED, "nested deeper than", id="nested",
                 marks=pytest.mark.hostile(fault="deeply nested JSON", outcome="clean error")),
    pytest.param(json.dumps(manifest(key=5)).encode(), "kernels[0].key: expected a string", id="key-int",
                 marks=pytest.mark.hostile(fault="malformed wheel manifest", outcome="clean error")),
    pytest.param(json.dumps(manifest(cubin_bytes="1")).encode(), "kernels[0].cubin_bytes", id="cubin_bytes-str",
                 marks=pytest.mark.hostile(fault="malformed wheel manifest", outcome="clean error")),
])
def test_emit_from_a_bad_manifest_writes_nothing(tmp_path: Path, capsys, kbuild_env: Override, data: bytes, fragment: str):
    kbuild_env.set(store=tmp_path / "store")
    path = tmp_path / "kbuild.json"
    path.write_bytes(data)
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, "emit", "--config", str(CMAKE_EXAMPLE / "pyproject.toml"), "--out-dir",
                         str(out_dir), "--from-manifest", str(path))
    assert_clean_error(code, err, names=[str(path), fragment])
    assert not out_dir.exists() and not (tmp_path / "store").exists()
    assert tree_digest(tmp_path) == {str(path): tree_digest(path.parent)[str(path)]}
