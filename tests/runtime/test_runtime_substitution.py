"""The run-time hook through Triton's real JIT path (fake driver, warmup: compile, hook, no launch).

A matching call gets the shipped cubin; a call differing in any key component, a different GPU,
a different Triton, a damaged cubin or KBUILD_RUNTIME=off leaves Triton's own cubin in place.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import MARKER

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.key import digest
from kbuild.settings.variables import Override


@pytest.fixture
def shipped(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> Any:
    return write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")


def warm_softmax(kernels: Any, *, rows: int = 64, cols: int = 1024, block: int = 1024, num_warps: int = 4,
                 offset: int = 0) -> Any:
    """``kernels.softmax[grid](...)`` exactly as kbx_jit.ops calls it, compiled but not launched."""
    import torch

    kernels.softmax.device_caches.clear()  # force Triton through _do_compile (disk cache may hit)
    buf = torch.empty(rows * cols + offset, dtype=torch.float16)
    x = buf[offset:].view(rows, cols)
    out = torch.empty_like(x)
    return kernels.softmax.warmup(out, x, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=num_warps,
                                  num_stages=3, grid=(rows,))


def only_event() -> Any:
    (event,) = kbuild.runtime.events()
    return event


def test_matching_call_loads_the_shipped_cubin(shipped: Any, kernels: Any, fake_gpu: Any,
                                               caplog: pytest.LogCaptureFixture) -> None:
    fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with caplog.at_level(logging.DEBUG, logger="kbuild.runtime"):
        kernel = warm_softmax(kernels)
    entry = next(e for e in shipped.index["entries"].values() if e["target"]["cc"] == 90)
    cubin = (shipped.data_dir / entry["cubin"]).read_bytes()
    assert cubin.endswith(MARKER)
    assert kernel.kernel == cubin and kernel.asm["cubin"] == cubin
    assert kernel.module is None  # replaced before Triton loads anything
    event = only_event()
    assert event.substituted and event.kernel == "softmax" and event.target == "sm_90a" and event.speedup == 1.25
    lines = [r.getMessage() for r in caplog.records if r.name == "kbuild.runtime" and "substituted" in r.getMessage()]
    assert len(lines) == 1 and "kbx_jit.kernels:softmax" in lines[0]
    # The same kernel compiled again (Triton's disk cache hit, new process in real life): substituted
    # again, and the debug line is not repeated.
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kbuild.runtime"):
        again = warm_softmax(kernels)
    assert again.kernel == cubin
    assert not [r for r in caplog.records if "substituted" in r.getMessage()]


def test_sm80_device_uses_the_sm80_entry(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    fake_gpu(80)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kernel = warm_softmax(kernels)
    event = only_event()
    assert event.substituted and event.target == "sm_80"
    assert kernel.kernel.endswith(MARKER)


@pytest.mark.parametrize(("change", "component"), [
    ({"num_warps": 8}, "kernel.num_warps"),
    ({"block": 512}, "kernel.constexprs.BLOCK"),
    ({"cols": 1000, "block": 1024}, "kernel.signature.n_cols"),
    ({"offset": 1}, "kernel.signature.in_ptr"),  # an unaligned tensor: the tuned code assumes alignment
])
def test_a_differing_call_keeps_tritons_cubin(shipped: Any, kernels: Any, fake_gpu: Any, change: dict[str, int],
                                              component: str) -> None:
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kernel = warm_softmax(kernels, **change)
    assert not kernel.kernel.endswith(MARKER)
    event = only_event()
    assert not event.substituted and component in event.reason


def test_other_sm_is_refused(jit_settings: Any, tuned_builds: list[Any], kernels: Any, fake_gpu: Any,
                             tmp_path: Path) -> None:
    only90 = write_package_data(jit_settings, [b for b in tuned_builds if b.target.cc == 90], tmp_path / "kbx_jit")
    fake_gpu(86)  # sm_86 runs sm_80 code, but Triton compiled for sm_86: not the same kernel
    kbuild.runtime.enable("kbx_jit", data_dir=only90.data_dir)
    assert not warm_softmax(kernels).kernel.endswith(MARKER)
    assert "target.cc" in only_event().reason


def test_other_triton_version_is_refused(shipped: Any, kernels: Any, fake_gpu: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import kbuild.runtime.keys

    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    monkeypatch.setattr(kbuild.runtime.keys, "current_triton_version", lambda: "3.7.0")
    assert not warm_softmax(kernels).kernel.endswith(MARKER)
    assert "compiler.triton: call '3.7.0', index '3.6.0'" in only_event().reason


def test_index_from_other_triton_is_refused(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    """The same from the other side: a wheel built with another Triton, run under this one."""
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    entries = {}
    for entry in doc["entries"].values():
        entry["key_components"]["compiler"]["triton"] = entry["triton_version"] = "3.5.1"
        entries[digest(entry["key_components"])] = entry
    doc["entries"] = entries
    path.write_text(json.dumps(doc))
    fake_gpu(90)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    assert not warm_softmax(kernels).kernel.endswith(MARKER)
    assert "compiler.triton" in only_event().reason


def test_digest_mismatch_is_refused(shipped: Any, kernels: Any, fake_gpu: Any,
                                    caplog: pytest.LogCaptureFixture) -> None:
    for p in shipped.data_dir.glob("*.cubin"):
        data = bytearray(p.read_bytes())
        data[100] ^= 0xFF
        p.write_bytes(bytes(data))
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    with caplog.at_level(logging.WARNING, logger="kbuild.runtime"):
        kernel = warm_softmax(kernels)
    assert not kernel.kernel.endswith(MARKER)
    assert "digest mismatch" in only_event().reason
    assert any("digest mismatch" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_metadata_check_is_refused(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    """Key equal but the compiled kernel disagrees with the artefact (e.g. shared memory): refused."""
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    for entry in doc["entries"].values():
        entry["checks"]["shared"] += 1024
    path.write_text(json.dumps(doc))
    fake_gpu(90)
    kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    assert not warm_softmax(kernels).kernel.endswith(MARKER)
    assert "shared" in only_event().reason


def test_runtime_off(shipped: Any, kernels: Any, fake_gpu: Any, kbuild_env: Override) -> None:
    fake_gpu(90)
    kbuild_env.set(runtime="off")
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir) is False
    assert kbuild.runtime.enabled_packages() == []
    assert not warm_softmax(kernels).kernel.endswith(MARKER)
    # Turned off after enabling: the installed hook stands aside too.
    kbuild_env.set(runtime=None)
    assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
    kbuild_env.set(runtime="0")
    assert not warm_softmax(kernels).kernel.endswith(MARKER)
    assert kbuild.runtime.events() == []
    kbuild_env.set(runtime="on")
    assert warm_softmax(kernels).kernel.endswith(MARKER)


def test_existing_hook_is_chained_and_restored(shipped: Any, kernels: Any, fake_gpu: Any) -> None:
    from triton import knobs

    seen: list[str] = []

    def theirs(**kwargs: Any) -> None:
        seen.append(kwargs["fn"].name)

    saved = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = theirs
    try:
        fake_gpu(90)
        kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir)
        assert warm_softmax(kernels).kernel.endswith(MARKER)
        assert seen == ["softmax"]
        kbuild.runtime.disable()
        assert knobs.runtime.jit_post_compile_hook is theirs
    finally:
        knobs.runtime.jit_post_compile_hook = saved


def test_damaged_index_is_ignored(shipped: Any, caplog: pytest.LogCaptureFixture) -> None:
    path = shipped.data_dir / "index.json"
    doc = json.loads(path.read_text())
    entry = next(iter(doc["entries"].values()))
    entry["key_components"]["kernel"]["num_warps"] = 8  # no longer the digest of its components
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="kbuild.runtime"):
        assert kbuild.runtime.enable("kbx_jit", data_dir=shipped.data_dir) is False
    assert any("not the digest" in r.getMessage() for r in caplog.records)


def test_enable_without_index_is_a_no_op(tmp_path: Path) -> None:
    assert kbuild.runtime.enable("kbx_jit", data_dir=tmp_path) is False
    assert kbuild.runtime.enable("no_such_package_kbuild_test") is False
