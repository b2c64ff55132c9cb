"""Bundles: deterministic export, verified import, tar-slip and non-bundles rejected."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from store_helpers import make_artefact

from kbuild.cache.bundle import MANIFEST, export_bundle, import_bundle, read_bundle
from kbuild.cache.local import LocalBackend
from kbuild.cache.tier import Tier
from kbuild.errors import BundleError


def filled(path, n=5, secret=None):
    tier = Tier(LocalBackend(path), secret=secret)
    arts = [make_artefact(f"b{i}", size=1000 * (i + 1), target="sm_90" if i % 2 else "sm_80") for i in range(n)]
    for a in arts:
        tier.put(a)
    return tier, arts


def snapshot(tier):
    return {k: (tier.backend.get_record(k), tier.get(k).cubin) for k in tier.keys()}


@pytest.mark.parametrize("name", ["bundle.tar", "bundle.tar.gz"])
def test_round_trip_is_byte_identical(tmp_path, name):
    src, arts = filled(tmp_path / "src")
    first = export_bundle(src, tmp_path / name)
    assert first.entries == len(arts)
    dst = Tier(LocalBackend(tmp_path / "dst"))
    report = import_bundle(dst, tmp_path / name)
    assert (report.imported, report.already_present) == (len(arts), 0)
    assert snapshot(dst) == snapshot(src)  # records (incl. timestamps) and cubins byte for byte
    for a in arts:
        assert dst.get(a.key) == a
    export_bundle(dst, tmp_path / ("again-" + name))
    assert (tmp_path / name).read_bytes() == (tmp_path / ("again-" + name)).read_bytes()
    again = import_bundle(dst, tmp_path / name)
    assert (again.imported, again.already_present) == (0, len(arts))


def test_archive_is_deterministic_and_sorted(tmp_path):
    src, _ = filled(tmp_path / "src")
    export_bundle(src, tmp_path / "x.tar")
    with tarfile.open(tmp_path / "x.tar") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == MANIFEST
    assert names[1:] == sorted(names[1:])
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.mode == 0o644 for m in members)


def test_export_filters_by_target(tmp_path):
    src, arts = filled(tmp_path / "src")
    report = export_bundle(src, tmp_path / "sm90.tar", target="sm_90")
    got = {a.key for a, _ in read_bundle(tmp_path / "sm90.tar")}
    assert got == {a.key for a in arts if a.meta["target"] == "sm_90"}
    assert report.entries == len(got) > 0


def _contents(path) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Every member of the archive at ``path`` with its bytes (an export holds regular files only)."""
    with tarfile.open(path) as tar:
        out = []
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None, m.name
            out.append((m, f.read()))
        return out


def _tar(path, members):
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


@pytest.mark.parametrize("member, match", [
    (_file("../evil"), r"contains '\.\.'"),
    (_file("ac/../../etc/passwd"), r"contains '\.\.'"),
    (_file("/etc/cron.d/evil"), "absolute path"),
    (_link("ac/" + "0" * 64, "/etc/passwd"), "is a link"),
    (_link("cas/" + "0" * 64, "../../x", tarfile.LNKTYPE), "is a link"),
    (_file("notes.txt"), "unexpected member"),
])
def test_crafted_archives_are_rejected_and_store_unchanged(tmp_path, member, match):
    src, _ = filled(tmp_path / "src", n=2)
    export_bundle(src, tmp_path / "good.tar")
    good = _contents(tmp_path / "good.tar")
    _tar(tmp_path / "evil.tar", [*good, member])
    dst, _ = filled(tmp_path / "dst", n=1)
    before = snapshot(dst)
    with pytest.raises(BundleError, match=match) as info:
        import_bundle(dst, tmp_path / "evil.tar")
    assert info.value.exit_code == 2 and "evil.tar" in str(info.value)
    assert snapshot(dst) == before
    assert not (tmp_path / "evil").exists()


def test_tampered_cubin_rejected(tmp_path):
    src, _ = filled(tmp_path / "src", n=2)
    export_bundle(src, tmp_path / "good.tar")
    members = _contents(tmp_path / "good.tar")
    info, data = members[-1]
    members[-1] = (info, data[:-1] + bytes([data[-1] ^ 1]))
    _tar(tmp_path / "bad.tar", members)
    with pytest.raises(BundleError, match="sha256"):
        import_bundle(Tier(LocalBackend(tmp_path / "dst")), tmp_path / "bad.tar")
    assert list(Tier(LocalBackend(tmp_path / "dst")).keys()) == []


@pytest.mark.parametrize("content", [b"", b"hello, this is not a tar file" * 40, b"\x1f\x8b\x08garbage"])
def test_not_a_bundle(tmp_path, content):
    (tmp_path / "junk.tar").write_bytes(content)
    with pytest.raises(BundleError, match="not a kbuild bundle") as info:
        import_bundle(Tier(LocalBackend(tmp_path / "dst")), tmp_path / "junk.tar")
    assert "junk.tar" in str(info.value)


def test_tar_without_manifest_is_not_a_bundle(tmp_path):
    _tar(tmp_path / "plain.tar", [_file("cas/" + "1" * 64)])
    with pytest.raises(BundleError, match="not a kbuild bundle"):
        read_bundle(tmp_path / "plain.tar")
    _tar(tmp_path / "m.tar", [_file(MANIFEST, json.dumps({"format": "other"}).encode())])
    with pytest.raises(BundleError, match="manifest"):
        read_bundle(tmp_path / "m.tar")


def test_with_secret_unsigned_bundles_are_rejected(tmp_path):
    src, _ = filled(tmp_path / "src", n=2)  # unsigned
    export_bundle(src, tmp_path / "u.tar")
    with pytest.raises(BundleError, match="not signed"):
        import_bundle(Tier(LocalBackend(tmp_path / "dst")), tmp_path / "u.tar", secret="k")
    signed, arts = filled(tmp_path / "signed", n=2, secret="k")
    export_bundle(signed, tmp_path / "s.tar")
    dst = Tier(LocalBackend(tmp_path / "dst2"))
    assert import_bundle(dst, tmp_path / "s.tar", secret="k").imported == 2
    assert all(dst.get(a.key) == a for a in arts)
