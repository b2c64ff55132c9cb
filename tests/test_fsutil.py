"""The one atomic-write helper: the old file or the new one, never a half, never a temp left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbuild import fsutil


def test_writes_bytes_and_text_and_creates_the_directory(tmp_path: Path):
    p = fsutil.write_atomic(tmp_path / "a" / "b.bin", b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01" and (p.stat().st_mode & 0o777) == 0o644
    fsutil.write_atomic(p, "é\n")
    assert p.read_bytes() == "é\n".encode()


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    p = tmp_path / "f.json"
    p.write_text("old")

    def boom(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        fsutil.write_atomic(p, "new")
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f.json"]


# read_bounded: the one reader of files named by users or by untrusted data (issue 32).

def test_read_bounded_reads_a_regular_file_within_the_limit(tmp_path):
    from kbuild.fsutil import read_bounded

    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    assert read_bounded(f, max_bytes=100) == b"x" * 100
    with pytest.raises(OSError, match="over the 99-byte limit"):
        read_bounded(f, max_bytes=99)


def test_read_bounded_refuses_fifo_device_and_directory_without_blocking(tmp_path):
    import os

    from kbuild.fsutil import read_bounded

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a FIFO, not a regular file"):
        read_bounded(fifo, max_bytes=10)  # would block forever in a plain open()
    link = tmp_path / "zero.cubin"
    link.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="a device, not a regular file"):
        read_bounded(link, max_bytes=10)
    with pytest.raises(OSError, match="a directory"):
        read_bounded(tmp_path, max_bytes=10)
    with pytest.raises(OSError):
        read_bounded(tmp_path / "missing", max_bytes=10)
