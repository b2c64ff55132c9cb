"""Issue 32, item 3: ``kbuild inspect`` checks a JIT package's wheel as the run time checks what it loads, and says
so in its exit status (1 for a failed check, as a verifier; 2 for input it cannot read).

The wheel holds the package data :func:`kbuild.build.package_data.write_package_data` writes for real Triton cubins
(the example's softmax: sm_90 BLOCK=1024 and 2048, sm_80 BLOCK=1024), zipped as a wheel would hold it; each case
edits it as the issue did.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_runtime_trust import _copy_rekeyed, _point_at_2048, _point_at_sm80_alone, _shared_zero

from kbuild.build.package_data import write_package_data
from kbuild.cli import main

PREFIX = "kbx_jit/_kbuild/"


@pytest.fixture
def wheel_files(jit_settings: Any, baseline_builds: list[Any], block_2048_build: Any, tmp_path: Path) -> dict[str, bytes]:
    data = write_package_data(jit_settings, [*baseline_builds, block_2048_build], tmp_path / "kbx_jit")
    files = {f"{PREFIX}{p.name}": p.read_bytes() for p in data.files}
    files["kbx_jit/__init__.py"] = b""
    return files


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def _inspect(capsys: pytest.CaptureFixture[str], wheel: Path) -> tuple[int, dict[str, Any], str]:
    code = main(["inspect", str(wheel), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def _index_edit(edit: Callable[[dict[str, Any], Any], None]) -> Callable[[dict[str, bytes]], None]:
    def apply(files: dict[str, bytes]) -> None:
        doc = json.loads(files[PREFIX + "index.json"])
        by = {(e["target"]["cc"], e["constexprs"]["BLOCK"]): (k, e) for k, e in doc["entries"].items()}
        edit(doc["entries"], by)
        files[PREFIX + "index.json"] = json.dumps(doc).encode()
    return apply


def _flip_a_byte(files: dict[str, bytes]) -> None:
    name = next(n for n in files if n.endswith(".cubin"))
    files[name] = files[name][:-1] + bytes([files[name][-1] ^ 1])


def _record_other_size(files: dict[str, bytes]) -> None:
    doc = json.loads(files[PREFIX + "index.json"])
    entry = next(iter(doc["entries"].values()))
    entry["cubin_bytes"] += 16
    files[PREFIX + "index.json"] = json.dumps(doc).encode()


#: case → (the edit, the cubin_check of the edited entry or None, a fragment of the problem reported)
CASES: dict[str, tuple[Callable[[dict[str, bytes]], None], str | None, str]] = {
    "entry points at the BLOCK=2048 cubin": (_index_edit(_point_at_2048), "conflict", "the index contradicts itself"),
    "entry points at the sm_80 cubin": (_index_edit(_point_at_sm80_alone), "ELF mismatch", "the cubin is for sm_80"),
    "shared memory set to 0": (_index_edit(_shared_zero), "ELF mismatch", "the cubin uses shared memory"),
    "a copy re-keyed to BLOCK=2048": (_index_edit(_copy_rekeyed), "conflict", "the index contradicts itself"),
    "a cubin byte changed": (_flip_a_byte, "sha256 mismatch", "sha256 mismatch"),
    "another size recorded": (_record_other_size, "size mismatch", "the entry records"),
    "a member out of the install folder": (lambda f: f.update({PREFIX + "../../evil.py": b"import os\n"}), None,
                                           "kbx_jit/_kbuild/../../evil.py: unsafe member name: '..'"),
    "an absolute member": (lambda f: f.update({"/etc/evil.py": b""}), None, "/etc/evil.py: unsafe member name"),
    "a module kbuild does not write": (lambda f: f.update({PREFIX + "evil.py": b"import os\n"}), None,
                                       "evil.py: not written by kbuild"),
    "an edited enabling module": (lambda f: f.update({PREFIX + "__init__.py": f[PREFIX + "__init__.py"] + b"import os\n"}),
                                  None, "__init__.py is not the module kbuild writes"),
}


@pytest.mark.hostile(fault="edited package index", outcome="clean error")
@pytest.mark.parametrize("case", sorted(CASES))
def test_inspect_fails_a_wheel_whose_package_data_does_not_hold(wheel_files: dict[str, bytes], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str], case: str):
    edit, check, fragment = CASES[case]
    edit(wheel_files)
    code, doc, err = _inspect(capsys, _zip(tmp_path / "kbx_jit-0.1.0-py3-none-any.whl", wheel_files))
    assert code == 1, err
    assert any(fragment in p for p in doc["problems"]), doc["problems"]
    assert "Traceback" not in err and "warning:" in err
    assert "".join(fragment.split()) in "".join(err.split())  # one warning line says it (the console wraps lines)
    entries = doc["package_data"][0]["entries"]
    assert len(entries) >= 2 and all({"key", "cubin", "cubin_sha256", "cubin_check", "problems"} <= set(e)
                                     for e in entries)  # the document stays complete
    if check is not None:
        assert check in {e["cubin_check"] for e in entries}


def test_inspect_passes_the_wheel_as_built(wheel_files: dict[str, bytes], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]):
    code, doc, err = _inspect(capsys, _zip(tmp_path / "kbx_jit-0.1.0-py3-none-any.whl", wheel_files))
    assert code == 0, err
    assert doc["problems"] == [] and "warning" not in err
    entries = doc["package_data"][0]["entries"]
    assert len(entries) == 3 and all(e["cubin_check"] == "ok" and e["problems"] == [] for e in entries)
    assert main(["inspect", str(tmp_path / "kbx_jit-0.1.0-py3-none-any.whl")]) == 0  # the table too


def test_inspect_of_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "x.whl"
    bad.write_bytes(b"not a zip")
    assert main(["inspect", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err
