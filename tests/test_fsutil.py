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
