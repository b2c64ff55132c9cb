"""kbuild.build.manifest.write_wheel_manifest: the backend's post-build step that puts the CUDA C++ kernels into a
scikit-build-core wheel's ``.dist-info/kbuild.json``. Every other member keeps its name, order, date, mode,
compression and bytes; ``RECORD`` carries the manifest's row with its real digest; the same input gives the same
bytes (a reproducible wheel stays reproducible), and rewriting with the same manifest changes nothing."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from kbuild.build.manifest import (
    build_manifest,
    manifest_bytes,
    wheel_manifest,
    with_cuda,
    write_wheel_manifest,
)
from kbuild.errors import UsageError

DATE = (2023, 11, 14, 22, 13, 20)
ENTRY = {"kernel": "gelu", "target": "sm_90", "arch": "sm_90", "key": "a" * 64, "cubin_sha256": "b" * 64,
         "cubin_bytes": 1234, "baseline_cubin_sha256": "b" * 64, "symbol": "_Z4geluPK6__halfPS_i",
         "function": "gelu_f16_kernel", "source": "src/elementwise.cu", "state": "baseline", "speedup": None,
         "ptxas": {"maxrregcount": 0, "minnctapersm": 0}}


def _row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(path: Path, manifest: bytes | None = None) -> dict[str, bytes]:
    """A small wheel as scikit-build-core writes a reproducible one (fixed dates, sorted, RECORD last)."""
    members = {"pkg/__init__.py": b"x = 1\n", "pkg/_ext.so": bytes(range(256)) * 64,
               "pkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 0.1\n",
               "pkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\n"}
    if manifest is not None:
        members["pkg-0.1.dist-info/kbuild.json"] = manifest
    record = "".join(_row(n, d) + "\n" for n, d in members.items()) + "pkg-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in [*members.items(), ("pkg-0.1.dist-info/RECORD", record.encode())]:
            info = zipfile.ZipInfo(name, date_time=DATE)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_STORED if name.endswith(".so") else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return members


def check_record(path: Path) -> list[str]:
    """Every RECORD row's digest and size against the member; the member names in archive order."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        rows = list(csv.reader(io.StringIO(zf.read("pkg-0.1.dist-info/RECORD").decode())))
        assert sorted(r[0] for r in rows) == sorted(names)
        for name, digest, size in rows:
            if name.endswith("/RECORD"):
                assert digest == "" and size == ""
                continue
            assert f"{name},{digest},{size}" == _row(name, zf.read(name))
    return names


def test_a_wheel_without_a_manifest_gets_one_before_record_the_rest_untouched(tmp_path):
    whl = tmp_path / "pkg-0.1-py3-none-any.whl"
    members = make_wheel(whl)
    before = {i.filename: i for i in zipfile.ZipFile(whl).infolist()}
    assert wheel_manifest(whl, missing_ok=True) is None
    manifest = with_cuda(build_manifest([], tune="auto"), [ENTRY])
    assert write_wheel_manifest(whl, manifest) == "pkg-0.1.dist-info/kbuild.json"

    names = check_record(whl)
    assert names == [*members, "pkg-0.1.dist-info/kbuild.json", "pkg-0.1.dist-info/RECORD"]
    assert wheel_manifest(whl) == manifest
    with zipfile.ZipFile(whl) as zf:
        assert zf.read("pkg-0.1.dist-info/kbuild.json") == manifest_bytes(manifest)
        for info in zf.infolist():
            old = before.get(info.filename, before["pkg-0.1.dist-info/RECORD"])
            assert (info.date_time, info.external_attr, info.compress_type) == \
                (old.date_time, old.external_attr, old.compress_type), info.filename
            if info.filename in members:
                assert zf.read(info) == members[info.filename]
    assert not list(tmp_path.glob(".*kbuild-tmp"))


def test_an_existing_manifest_is_replaced_in_place_and_the_rewrite_is_reproducible(tmp_path):
    triton_only = build_manifest([], tune="auto")
    a, b = tmp_path / "a" / "pkg-0.1-py3-none-any.whl", tmp_path / "b" / "pkg-0.1-py3-none-any.whl"
    for w in (a, b):
        w.parent.mkdir()
        make_wheel(w, manifest_bytes(triton_only))
    order = zipfile.ZipFile(a).namelist()
    manifest = with_cuda(triton_only, [ENTRY])
    write_wheel_manifest(a, manifest)
    write_wheel_manifest(b, manifest)
    assert a.read_bytes() == b.read_bytes()  # same input, same bytes
    assert check_record(a) == order  # replaced where it was, nothing moved
    assert wheel_manifest(a) == manifest
    once = a.read_bytes()
    write_wheel_manifest(a, manifest)
    assert a.read_bytes() == once  # idempotent: a kept build directory's rebuild gives the same wheel


def test_not_a_wheel_and_a_bad_manifest_are_errors_naming_the_file(tmp_path):
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as zf:
        zf.writestr("a.txt", b"a")
    with pytest.raises(UsageError, match=r"plain\.zip: not a wheel"):
        write_wheel_manifest(plain, build_manifest([], tune="auto"))
    broken = tmp_path / "pkg-0.1-py3-none-any.whl"
    make_wheel(broken, b"{not json")
    with pytest.raises(UsageError, match=r"kbuild\.json"):
        wheel_manifest(broken, missing_ok=True)  # only a missing manifest is None; a broken one is not replaced
