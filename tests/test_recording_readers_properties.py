"""Property tests of the readers of files that other machines write and users pass in: ``kbuild record``'s
recordings (committed, merged across machines) and ``KBUILD_RUNTIME_REPORT`` coverage reports (``kbuild coverage``).
As in ``test_json_readers_properties.py``: arbitrary bytes, arbitrary JSON, a valid document with random edits.
Only the documented outcome may come out (``KBX_PROPERTY_EXAMPLES`` sets the examples a test draws, 60 by
default):

=====================================  =====================================================================
reader                                 documented outcome on bad input
=====================================  =====================================================================
``kbuild.record.format.load``          :class:`UsageError` naming the file (and the key, when it is one)
``kbuild bench --recording F --list``  exit 0 or 2 (the recording refused, naming the file), never a traceback
``kbuild coverage FILE...``            exit 2, one ``error:`` line naming the file; 0 or 1 (misses) otherwise
``kbuild.record.capture.load``         :class:`UsageError` naming the captures' ``index.json``
``Captures.tensor``                    :class:`UsageError` naming the ``.npy`` file
=====================================  =====================================================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_helpers import json_values, mutated

from kbuild.cli import main
from kbuild.errors import UsageError
from kbuild.record import format as rf
from kbuild.runtime.coverage import Coverage

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "examples" / "liger" / "recordings" / "llama3-8b.cpu.json"
VALID_RECORDING = json.loads(RECORDING.read_text())


def _valid_report() -> dict[str, Any]:
    cov = Coverage()
    spec = {"target": "sm_90", "signature": {"x": "*fp16:16", "n": "i32"}, "constexprs": {"BLOCK": 1024},
            "options": {"num_warps": 4, "num_stages": 3, "num_ctas": 1}}
    cov.specialization("pkg.kernels:softmax", spec, hit=True, package="pkg", shipped=2, stage="zero-jit", entry="e1")
    cov.specialization("pkg.kernels:softmax", {**spec, "constexprs": {"BLOCK": 2048}}, hit=False, package="pkg",
                       shipped=2, reason="constexprs.BLOCK: 2048, shipped 1024", nearest={"entry": "e1"})
    cov.autotune("pkg.kernels:matmul", [512, 512, "torch.float16"], answered=True, target="sm_90", package="pkg",
                 shipped=1, entry="e2")
    return cov.report(mode="on", packages={"pkg": {"data_dir": "/x", "entries": 3}})


VALID_REPORT = _valid_report()
SETTINGS = settings(max_examples=int(os.environ.get("KBX_PROPERTY_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_the_valid_documents_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rf.load(str(RECORDING)).kernels
    path = tmp_path / "r.json"
    path.write_text(json.dumps(VALID_REPORT))
    assert main(["coverage", str(path)]) == 1  # one miss
    assert "1 report(s)" in capsys.readouterr().out


def _load_recording(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "rec.json"
    path.write_bytes(data)
    try:
        rf.load(str(path))
    except UsageError as exc:
        assert str(path) in str(exc), exc


@SETTINGS
@given(data=st.binary(max_size=200))
def test_recording_from_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    _load_recording(tmp_path, data)


@SETTINGS
@given(doc=json_values())
def test_recording_from_arbitrary_json(tmp_path: Path, doc: Any) -> None:
    _load_recording(tmp_path, json.dumps(doc).encode())


@SETTINGS
@given(doc=mutated(VALID_RECORDING))
def test_recording_with_random_edits(tmp_path: Path, doc: Any) -> None:
    _load_recording(tmp_path, json.dumps(doc).encode())


@settings(max_examples=max(10, SETTINGS.max_examples // 3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=mutated(VALID_RECORDING))
def test_bench_list_of_an_edited_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any) -> None:
    """Past the reader: the specs made from each recorded call (inputs planned from the samples' tensors)."""
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    rc = main(["bench", "--recording", str(path), "--list", "--json"])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err, (rc, err)
    if rc == 2:
        assert err.startswith("error: ") and str(path) in err, err


#: Identity fields of a recorded specialisation (its ``id`` is their content id).
_IDENTITY = ("target", "triton", "signature", "constexprs", "options", "compiler_options", "heuristics",
             "autotune_config", "unsupported")
_LEAVES = st.sampled_from([0, -1, 1, 16, 2**31, 2**63, "", "i32", "*fp16:16", "*i8", "fp32", "i1", "nan", "sm_80",
                           True, None, 1.5, [1], {"a": 1}])


@st.composite
def edited_values(draw: st.DrawFn) -> Any:
    """The example recording with 1 to 3 values of its specialisations replaced (a signature type, a constexpr, a
    launch option, a sample's argument or shape, the target), the ids recomputed: documents the reader's structure
    checks let through, so that what reads them next is tested too."""
    import copy

    from kbuild.record.format import content_id

    doc = copy.deepcopy(VALID_RECORDING)
    for _ in range(draw(st.integers(1, 3))):
        sd = draw(st.sampled_from(draw(st.sampled_from(doc["kernels"]))["specializations"]))
        where = draw(st.sampled_from(["signature", "constexprs", "options", "sample", "target"]))
        if where == "sample" and sd["samples"]:
            args = draw(st.sampled_from(sd["samples"]))["args"]
            name = draw(st.sampled_from(sorted(args)))
            value = args[name]
            if isinstance(value, dict) and value.get("shape") and draw(st.booleans()):
                value["shape"][draw(st.integers(0, len(value["shape"]) - 1))] = draw(st.sampled_from([0, 1, 7, 2**31]))
            else:
                args[name] = draw(_LEAVES)
        elif where == "target":
            sd["target"] = draw(_LEAVES)
        elif sd.get(where):
            name = draw(st.sampled_from([*sorted(sd[where]), "num_ctas", "maxnreg", "extra"]))
            sd[where][name] = draw(_LEAVES)
        sd["id"] = content_id({f: sd[f] for f in _IDENTITY})
    return doc


@settings(max_examples=max(10, SETTINGS.max_examples // 3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=edited_values())
def test_bench_list_of_a_recording_with_edited_values(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      doc: Any) -> None:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    rc = main(["bench", "--recording", str(path), "--list", "--json"])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err, (rc, err)


def _coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(data)
    rc = main(["coverage", str(path), "--json"])
    err = capsys.readouterr().err
    assert rc in (0, 1, 2), rc
    if rc == 2:
        assert err.startswith("error: ") and str(path) in err and "Traceback" not in err, err
    else:
        assert not err.strip(), err


@SETTINGS
@given(data=st.binary(max_size=200))
def test_coverage_from_arbitrary_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes) -> None:
    _coverage(tmp_path, capsys, data)


@SETTINGS
@given(doc=mutated(VALID_REPORT))
def test_coverage_with_random_edits(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: Any) -> None:
    _coverage(tmp_path, capsys, json.dumps(doc).encode())


VALID_CAPTURES = {"format": "kbuild-captures", "version": 1, "calls_per_specialization": 2, "max_mib": 64,
                  "captures": {"abc123": [{"sample": {"args": {"n": 4}, "grid": [1], "sm_count": 132},
                                           "tensors": {"Y_ptr": "0" * 64 + ".npy"}},
                                          {"sample": {"args": {}}, "skipped": "too large"}]}}


def _load_captures(tmp_path: Path, doc: Any) -> None:
    from kbuild.record import capture

    folder = tmp_path / "rec.captures"
    folder.mkdir(exist_ok=True)
    (folder / capture.INDEX).write_text(json.dumps(doc))
    try:
        capture.load(folder)
    except UsageError as exc:
        assert str(folder / capture.INDEX) in str(exc), exc


@SETTINGS
@given(doc=mutated(VALID_CAPTURES))
def test_captures_index_with_random_edits(tmp_path: Path, doc: Any) -> None:
    _load_captures(tmp_path, doc)


@SETTINGS
@given(data=st.binary(max_size=300), header=st.booleans())
def test_a_captured_tensor_from_arbitrary_bytes(tmp_path: Path, data: bytes, header: bool) -> None:
    """Bytes named by their sha256 (so that only the .npy reader judges them), raw or behind a valid .npy magic."""
    import hashlib

    from kbuild.record import capture

    blob = (b"\x93NUMPY\x01\x00" + data) if header else data
    name = hashlib.sha256(blob).hexdigest() + ".npy"
    (tmp_path / name).write_bytes(blob)
    caps = capture.Captures(tmp_path)
    try:
        caps.tensor(name, dtype="torch.int64", shape=[4], where="the call's Y_ptr")
    except UsageError as exc:
        assert name in str(exc), exc


def test_the_defects_these_properties_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the properties here (2,000-3,000 examples each) and fixed: an unhashable ``compiler_options``
    reference raised TypeError from the recording reader, a package that is not an object raised TypeError or
    ValueError from ``kbuild coverage``, a captures index's counts that are not integers did the same, and a
    sample's tensor with a malformed shape passed the reader and raised TypeError in ``kbuild bench --recording``."""
    import copy

    doc = copy.deepcopy(VALID_RECORDING)
    doc["kernels"][0]["specializations"][0]["compiler_options"] = ["not", "a", "reference"]
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"specializations\[0\]\.compiler_options: .* is not in the compiler_options"):
        rf.load(str(path))
    sample = doc["kernels"][0]["specializations"][0]["samples"][0]
    tensor = next(n for n, v in sample["args"].items() if isinstance(v, dict) and "shape" in v)
    doc = copy.deepcopy(VALID_RECORDING)  # a tensor's shape holding an object reached the input planner
    doc["kernels"][0]["specializations"][0]["samples"][0]["args"][tensor]["shape"] = [{"a": 1}]
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=rf"samples\[0\]\.args\.{tensor}\.shape: expected an array of non-negative"):
        rf.load(str(path))
    from kbuild.record.format import content_id

    for where, name, value, message in (("options", "num_ctas", "sm_90", "expected an integer, got 'sm_90'"),
                                        ("constexprs", "BLOCK_SIZE", {"a": 1}, "has the one key 'dtype'"),
                                        ("options", "num_warps", 3, "expected a power of two from 1 to 32, got 3"),
                                        ("signature", next(iter(doc["kernels"][0]["specializations"][0]["signature"])),
                                         "nan", "is not a Triton type")):
        doc = copy.deepcopy(VALID_RECORDING)  # passed the reader, then raised ValueError / SignatureError
        sd = doc["kernels"][0]["specializations"][0]
        sd[where][name] = value
        sd["id"] = content_id({f: sd[f] for f in _IDENTITY})
        path.write_text(json.dumps(doc))
        with pytest.raises(UsageError, match=rf"specializations\[0\]\.{where}\.{name}: .*{message}"):
            rf.load(str(path))
    for bad in (None, "ab", [1]):
        report = {**VALID_REPORT, "packages": {"pkg": bad}}
        path.write_text(json.dumps(report))
        assert main(["coverage", str(path)]) == 2
        assert "packages.pkg: expected an object" in capsys.readouterr().err
    from kbuild.record import capture

    for bad_mib in (":", [1], -1, 2.5):
        folder = tmp_path / f"c{bad_mib!s}.captures"
        folder.mkdir()
        (folder / capture.INDEX).write_text(json.dumps({**VALID_CAPTURES, "max_mib": bad_mib}))
        with pytest.raises(UsageError, match="max_mib: expected a non-negative integer"):
            capture.load(folder)



def test_triton_refusing_launch_options_is_a_usage_error() -> None:
    import types

    from kbuild.compile.triton_aot import compiler_options
    from kbuild.targets import parse_target

    spec = types.SimpleNamespace(name="k", num_warps=3, num_stages=3, maxnreg=None, num_ctas=1, ptx_options="")
    with pytest.raises(UsageError, match=r"k for sm_90: Triton refuses the launch options .*power of 2"):
        compiler_options(parse_target("sm_90"), spec)  # type: ignore[arg-type]


def test_recorded_launch_options_are_checked_by_the_declarations_owner(tmp_path: Path) -> None:
    """One owner (``kbuild.declarations.space.check_option``): a recording may hold what Triton ran (0 stages), a
    searched space only 1 to 8."""
    import copy

    from kbuild.declarations.space import SpaceError, check_option
    from kbuild.record.format import content_id

    assert check_option("num_stages", 0, "k", recorded=True) == 0
    with pytest.raises(SpaceError, match="expected 1 to 8"):
        check_option("num_stages", 0, "k")
    doc = copy.deepcopy(VALID_RECORDING)
    sd = doc["kernels"][0]["specializations"][0]
    sd["options"]["num_stages"] = 0
    sd["id"] = content_id({f: sd[f] for f in _IDENTITY})
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(doc))
    assert rf.load(str(path)).kernels
