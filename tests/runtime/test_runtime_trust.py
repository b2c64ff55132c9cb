"""Issue 32, item 3 and part of 5: the run time loads only a cubin that proves to be what its index entry claims.

A package ships real Triton cubins of the example's softmax (sm_90 with BLOCK=1024 and BLOCK=2048, sm_80 with
BLOCK=1024). Each case edits the installed ``_kbuild/`` the way the issue did, then makes the kernel's first
call through Triton's real JIT path (``JITFunction.run``; only the driver's load and launch are stand-ins,
``runtime_helpers.FakeDriver``, and Triton's compiler raises :class:`CompilerCalled`): a refused cubin must
fall back to Triton's compile (the raise), hand nothing to the driver, and log one warning saying why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_runtime_zero_jit import CompilerCalled, launch_softmax, no_compiler  # noqa: F401  (fixture)

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.key import digest


@pytest.fixture
def shipped(jit_settings: Any, baseline_builds: list[Any], block_2048_build: Any, tmp_path: Path) -> Any:
    return write_package_data(jit_settings, [*baseline_builds, block_2048_build], tmp_path / "kbx_jit")


def _entries(shipped: Any) -> dict[tuple[int, int], tuple[str, dict[str, Any]]]:
    """(cc, BLOCK) → (key, entry) of the index as written."""
    return {(e["target"]["cc"], e["constexprs"]["BLOCK"]): (k, e) for k, e in shipped.index["entries"].items()}


def _edit(shipped: Any, change: Callable[[dict[str, Any], dict[tuple[int, int], tuple[str, dict[str, Any]]]], None]) -> None:
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    change(doc["entries"], {(e["target"]["cc"], e["constexprs"]["BLOCK"]): (k, e) for k, e in doc["entries"].items()})
    path.write_text(json.dumps(doc))


def _point_at(entry: dict[str, Any], other: dict[str, Any]) -> None:
    """Make ``entry`` name ``other``'s cubin, its digest and size updated (as an editor would)."""
    for field in ("cubin", "cubin_sha256", "cubin_bytes"):
        entry[field] = other[field]


def _rekey(entries: dict[str, Any], key: str, block: int) -> None:
    """Add a copy of ``entries[key]`` claiming another BLOCK, its key recomputed so that the index still parses."""
    copy = json.loads(json.dumps(entries[key]))
    for where in (copy["constexprs"], copy["key_components"]["kernel"]["constexprs"], copy["config"]["kwargs"]):
        where["BLOCK"] = block
    entries[digest(copy["key_components"])] = copy


def _point_at_2048(entries: dict[str, Any], by: dict[tuple[int, int], tuple[str, dict[str, Any]]]) -> None:
    _point_at(by[(90, 1024)][1], by[(90, 2048)][1])


def _point_at_sm80(entries: dict[str, Any], by: dict[tuple[int, int], tuple[str, dict[str, Any]]]) -> None:
    _point_at(by[(90, 1024)][1], by[(80, 1024)][1])


def _point_at_sm80_alone(entries: dict[str, Any], by: dict[tuple[int, int], tuple[str, dict[str, Any]]]) -> None:
    _point_at(by[(90, 1024)][1], by[(80, 1024)][1])
    del entries[by[(80, 1024)][0]]  # no other entry names the sm_80 cubin now: only its ELF header tells


def _shared_zero(entries: dict[str, Any], by: dict[tuple[int, int], tuple[str, dict[str, Any]]]) -> None:
    entry = by[(90, 1024)][1]
    entry["checks"]["shared"] = 0
    entry["triton_metadata"]["shared"] = 0


def _copy_rekeyed(entries: dict[str, Any], by: dict[tuple[int, int], tuple[str, dict[str, Any]]]) -> None:
    del entries[by[(90, 2048)][0]]  # the package ships BLOCK=1024 only; the copy claims 2048
    _rekey(entries, by[(90, 1024)][0], 2048)


#: case → (the edit, the call that must fall back, what the warning says)
CASES: dict[str, tuple[Any, dict[str, int], str]] = {
    "block-1024 entry points at the block-2048 cubin": (_point_at_2048, {}, "the index contradicts itself"),
    "sm_90 entry points at the sm_80 cubin": (_point_at_sm80, {}, "the index contradicts itself"),
    "sm_90 entry points at the sm_80 cubin, its own entry gone": (_point_at_sm80_alone, {}, "the cubin is for sm_80"),
    "shared memory set to 0": (_shared_zero, {}, "the cubin uses shared memory"),
    "a copy re-keyed to BLOCK=2048": (_copy_rekeyed, {"block": 2048, "cols": 2048}, "the index contradicts itself"),
}


def _first_call_falls_back(shipped: Any, kernels: Any, fake_gpu: Any, caplog: pytest.LogCaptureFixture,
                           call: dict[str, int], message: str) -> None:
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with caplog.at_level(logging.INFO, logger="kbuild.runtime"), pytest.raises(CompilerCalled):
        launch_softmax(kernels, **call)
    assert fake.loads == []  # nothing reached the driver
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and message in warnings[0], warnings
    assert not [e for e in kbuild.runtime.events() if e.substituted]


@pytest.mark.hostile(fault="edited package index", outcome="served correct bytes")
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.usefixtures("no_compiler")
def test_an_edited_index_entry_is_not_loaded(shipped: Any, kernels: Any, fake_gpu: Any,
                                             caplog: pytest.LogCaptureFixture, case: str) -> None:
    edit, call, message = CASES[case]
    _edit(shipped, edit)
    _first_call_falls_back(shipped, kernels, fake_gpu, caplog, call, message)


def test_the_untouched_package_is_loaded(shipped: Any, kernels: Any, fake_gpu: Any,
                                         request: pytest.FixtureRequest) -> None:
    """The control: every check passes on what the build wrote, for both sizes."""
    compiler_calls = request.getfixturevalue("no_compiler")
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    launch_softmax(kernels)
    launch_softmax(kernels, block=2048, cols=2048)
    assert compiler_calls == [] and len(fake.loads) == 2
    by = _entries(shipped)
    assert [x[1] for x in fake.loads] == [(shipped.data_dir / by[(90, b)][1]["cubin"]).read_bytes() for b in (1024, 2048)]


def _replace_cubin(shipped: Any, make: Callable[[Path], None]) -> None:
    entry = _entries(shipped)[(90, 1024)][1]
    path = shipped.data_dir / entry["cubin"]
    path.unlink()
    make(path)


#: case → how the cubin file is replaced, what the warning says
FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "a FIFO": (lambda p: os.mkfifo(p), "a FIFO, not a regular file"),
    "a link to /dev/zero": (lambda p: p.symlink_to("/dev/zero"), "a device, not a regular file"),
}


@pytest.mark.hostile(fault="hostile package data file", outcome="served correct bytes")
@pytest.mark.parametrize("case", sorted(FILES))
@pytest.mark.usefixtures("no_compiler")
def test_a_cubin_that_is_not_a_regular_file_neither_blocks_nor_is_read(shipped: Any, kernels: Any, fake_gpu: Any,
                                                                       caplog: pytest.LogCaptureFixture,
                                                                       case: str) -> None:
    make, message = FILES[case]
    _replace_cubin(shipped, make)
    outcome: list[BaseException | None] = []

    def first_call() -> None:
        try:
            _first_call_falls_back(shipped, kernels, fake_gpu, caplog, {}, message)
            outcome.append(None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=first_call, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), f"the first call with {case} as its cubin is still waiting after 60 s"
    if outcome[0] is not None:
        raise outcome[0]


@pytest.mark.hostile(fault="edited package index", outcome="served correct bytes")
def test_the_post_compile_substitution_checks_the_cubin_too(shipped: Any, kernels: Any, fake_gpu: Any,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A version 1 index (no Triton metadata: Triton compiles, then the cubin would be swapped) whose sm_90 entry
    names the sm_80 cubin: the swap is refused against the cubin Triton just compiled."""
    def v1_pointing_at_sm80(entries: dict[str, Any], by: Any) -> None:
        _point_at_sm80_alone(entries, by)
        for entry in entries.values():
            for field in ("triton_metadata", "config", "autotune"):
                entry.pop(field, None)

    path = shipped.data_dir / "index.json"
    _edit(shipped, v1_pointing_at_sm80)
    doc = json.loads(path.read_text())
    doc["version"] = 1
    path.write_text(json.dumps(doc))
    fake = fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with caplog.at_level(logging.INFO, logger="kbuild.runtime"):
        kernel = launch_softmax(kernels)  # Triton compiles (CPU ptxas); the hook declines the swap
    ((_, loaded, _, _),) = fake.loads
    assert loaded == kernel.asm["cubin"]  # Triton's own cubin, not the shipped one
    (event,) = kbuild.runtime.events()
    assert not event.substituted and "the cubin is for sm_80" in event.reason
    assert any("the cubin is for sm_80" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_the_build_files_a_shared_cubin_under_each_key_declared(jit_settings: Any, baseline_builds: list[Any],
                                                                 tmp_path: Path) -> None:
    """Two specialisations whose compiles are byte-identical (here: the same build declared under a second name
    with another num_stages, a loop-free kernel): the build writes the cubin once and files it under both keys,
    each entry listing the other in ``shares_cubin_with``, and the run time trusts both."""
    from kbuild.key import KernelKey

    (b90,) = [b for b in baseline_builds if b.target.name == "sm_90"]
    twin = dataclasses.replace(b90, spec=dataclasses.replace(b90.spec, name="softmax_twin"))
    comps = json.loads(json.dumps(b90.baseline_key.components))
    comps["kernel"]["num_stages"] = 2
    twin.baseline_key = KernelKey(comps)
    data = write_package_data(jit_settings, [b90, twin], tmp_path / "kbx_jit")
    entries = data.index["entries"]
    assert len(entries) == 2 and data.skipped == [] and len(list(data.data_dir.glob("*.cubin"))) == 1
    assert {k: e["shares_cubin_with"] for k, e in entries.items()} == {
        b90.baseline_key.hex: [twin.baseline_key.hex], twin.baseline_key.hex: [b90.baseline_key.hex]}
    from kbuild.runtime.index import load_index

    assert load_index(data.data_dir / "index.json").conflicts == {}


#: An edit of the sm_90 BLOCK=1024 entry → what :func:`kbuild.runtime.verify.cubin_mismatch` says (the cubin is the
#: real one the entry names; only what the entry claims about it changed).
ENTRY_EDITS: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "target sm_80": (lambda e: e["target"].update(arch="sm_80", cc=80), "the cubin is for sm_90a"),
    "symbol": (lambda e: (e["checks"].update(name="other"), e["triton_metadata"].update(name="other")),
               "the entry's symbol is 'other'"),
    "function": (lambda e: e.update(function="kbx_jit.kernels:other"), "is not the entry's function"),
    "num_warps 8": (lambda e: (e["checks"].update(num_warps=8), e["triton_metadata"].update(num_warps=8)),
                    "the cubin's block is 128×1×1 threads"),
    "an i64 argument": (lambda e: e["signature"].update(n_cols="i64"), "the cubin's parameters are"),
    "an argument fewer": (lambda e: e["signature"].pop("n_cols"), "the cubin's parameters are"),
    "shared 0": (lambda e: e["checks"].update(shared=0), "the cubin uses shared memory"),
}


@pytest.mark.parametrize("case", sorted(ENTRY_EDITS))
def test_the_cubin_check_compares_what_the_elf_states(shipped: Any, case: str) -> None:
    from kbuild.runtime.verify import cubin_mismatch, read_cubin

    entry = json.loads(json.dumps(_entries(shipped)[(90, 1024)][1]))
    data = read_cubin(shipped.data_dir, entry)
    assert cubin_mismatch(data, entry, where="c") is None
    edit, message = ENTRY_EDITS[case]
    edit(entry)
    problem = cubin_mismatch(data, entry, where="c")
    assert problem is not None and message in problem, problem


def test_the_cubin_check_compares_the_call(shipped: Any) -> None:
    from kbuild.runtime.verify import Expected, call_params, cubin_mismatch, read_cubin

    entry = _entries(shipped)[(90, 1024)][1]
    data = read_cubin(shipped.data_dir, entry)
    signature = {"out_ptr": "*fp16", "in_ptr": "*fp16", "in_row_stride": "i32", "out_row_stride": "i32",
                 "n_cols": "i32", "BLOCK": "constexpr"}
    assert call_params(signature) == [8, 8, 4, 4, 4, 8, 8]
    assert cubin_mismatch(data, entry, where="c", call=Expected(cc=90, params=call_params(signature), num_warps=4,
                                                                  name="softmax")) is None
    for call, message in [(Expected(cc=80), "this GPU is sm_80"), (Expected(num_warps=8), "num_warps is [4, 8]"),
                          (Expected(name="other"), "the called function is 'other'"),
                          (Expected(params=call_params({**signature, "n_cols": "i64"})), "the call passes")]:
        problem = cubin_mismatch(data, entry, where="c", call=call)
        assert problem is not None and message in problem, (call, problem)


@pytest.mark.parametrize(("size", "message"), [(None, "no usable cubin size"), (10**12, "no usable cubin size"),
                                                (100, "over the 100-byte limit"), (+1, "bytes, the entry records")])
def test_the_cubin_is_read_within_its_recorded_size(shipped: Any, size: int | None, message: str) -> None:
    from kbuild.runtime.verify import Refused, read_cubin

    entry = _entries(shipped)[(90, 1024)][1]
    entry = dict(entry, cubin_bytes=entry["cubin_bytes"] + 1 if size == 1 else size)
    with pytest.raises(Refused, match=message):
        read_cubin(shipped.data_dir, entry)
