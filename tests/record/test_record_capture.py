"""``kbuild record --capture N`` (issue 35, part 1): the integer and bool tensors of up to N calls per
specialisation, beside the recording, bounded, content-addressed (real tensors, real files, in this process).
A real workload recorded with ``--capture`` and the specs replaying it: tests/bench/test_bench_recorded_capture.py.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hostile_helpers import assert_clean_error

from kbuild.cli import main
from kbuild.errors import UsageError
from kbuild.record import capture


def _sample(rows: int) -> dict[str, Any]:
    return {"args": {"x": {"dtype": "torch.float32", "shape": [rows, 4], "strides": [4, 1]},
                     "idx": {"dtype": "torch.int64", "shape": [rows], "strides": [1]}, "n": rows},
            "grid": [rows], "sm_count": 132}


def _args(rows: int) -> dict[str, Any]:
    return {"x": torch.randn(rows, 4), "idx": torch.arange(rows) * 3, "n": rows}


def test_a_call_s_integer_tensors_are_kept_under_their_hash_and_floats_are_not(tmp_path: Path) -> None:
    cap = capture.Capturer(tmp_path, limit=2, max_mib=1)
    entry = cap.offer("spec", _sample(5), _args(5))
    assert entry is not None and set(entry["tensors"]) == {"idx"}
    data = (tmp_path / entry["tensors"]["idx"]).read_bytes()
    assert entry["tensors"]["idx"] == hashlib.sha256(data).hexdigest() + ".npy"
    assert cap.offer("spec", _sample(5), _args(5)) is None  # the same call again
    assert cap.offer("floats", {"args": {}, "grid": [1], "sm_count": 1}, {"x": torch.randn(3)}) is None


def test_at_most_n_calls_the_first_in_canonical_order_and_a_call_past_the_bound_is_listed(tmp_path: Path) -> None:
    cap = capture.Capturer(tmp_path, limit=2, max_mib=1)
    order = sorted([3, 4, 5], key=lambda r: capture.sample_order(_sample(r)))
    assert cap.offer("s", _sample(order[2]), _args(order[2])) is not None
    assert cap.offer("s", _sample(order[1]), _args(order[1])) is not None
    assert cap.offer("s", _sample(order[0]), _args(order[0])) is not None  # smaller: kept, the largest goes
    assert cap.offer("s", _sample(order[2]), _args(order[2])) is None
    big = 150_000  # 1.1 MiB of int64 indices
    skipped = capture.Capturer(tmp_path, limit=2, max_mib=1).offer("b", _sample(big), _args(big))
    assert skipped is not None and "tensors" not in skipped
    assert skipped["skipped"] == "the call's integer and bool tensors hold 1.1 MiB, more than --capture-mib 1"


def test_the_store_keeps_n_per_specialisation_adds_to_an_index_and_reads_back(tmp_path: Path) -> None:
    staging, dest = tmp_path / "staging", tmp_path / "rec.captures"
    staging.mkdir()
    cap = capture.Capturer(staging, limit=3, max_mib=1)
    entries = [cap.offer("s", _sample(r), _args(r)) for r in (3, 4)]
    counts = capture.store(dest, [e for e in entries if e], staging, limit=2, max_mib=1)
    assert counts == {"calls": 2, "skipped": 0, "files_written": 2}
    more = [cap.offer("s", _sample(5), _args(5)), cap.offer("t", _sample(6), _args(6))]
    capture.store(dest, [e for e in more if e], staging, limit=2, max_mib=1)
    got = capture.load(dest)
    assert got is not None and got.calls_per_specialization == 2
    kept = sorted([3, 4, 5], key=lambda r: capture.sample_order(_sample(r)))[:2]
    assert [e["sample"]["args"]["n"] for e in got.of("s")] == kept and len(got.of("t")) == 1
    e = got.of("t")[0]
    t = got.tensor(e["tensors"]["idx"], dtype="torch.int64", shape=[6], where="idx")
    assert torch.equal(t, torch.arange(6) * 3)
    with pytest.raises(UsageError, match=r"but idx is torch\.int32 of shape"):
        got.tensor(e["tensors"]["idx"], dtype="torch.int32", shape=[6], where="idx")
    path = dest / e["tensors"]["idx"]
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(UsageError, match="the file's sha256 is not its name"):
        got.tensor(e["tensors"]["idx"], dtype="torch.int64", shape=[6], where="idx")
    (dest / "index.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(UsageError, match="not a kbuild captures index"):
        capture.load(dest)
    assert capture.captures_dir("a/x.recording.json") == Path("a/x.recording.captures")


@pytest.mark.parametrize(("argv", "message"), [
    (["--capture-mib", "8"], "--capture-mib sets the bound of --capture N: give --capture too"),
    (["--capture", "-1"], "--capture '-1': expected a whole number from 1 to 1,000"),
    (["--capture", "2", "--merge", "a.json"], "--capture records a command's calls; --merge merges recordings"),
])
def test_bad_capture_arguments_are_one_clean_error(tmp_path: Path, capsys: Any, argv: list[str],
                                                   message: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        tail = [] if "--merge" in argv else ["--", sys.executable, "-c", "pass"]
        status = main(["record", "--mode", "cpu", "--out", "r.json", *argv, *tail])
    assert_clean_error(status, capsys.readouterr().err, names=[message])
    assert not list(tmp_path.iterdir())
