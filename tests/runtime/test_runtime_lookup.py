"""The run time's pure lookup (kbuild.runtime.lookup) on hand-made calls and entries: no Triton compile, no package
data on disk, no state. The loading paths that ask it run in test_runtime_zero_jit.py, test_runtime_substitution.py
and test_runtime_direct.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kbuild.canonical import canonical_json
from kbuild.runtime import lookup
from kbuild.runtime.index import Index, ShippedEntry
from kbuild.runtime.keys import CallSpecialization

CALL = CallSpecialization(function="pkg.kernels:f", name="f", source_hash="abc",
                          signature={"x": "*fp16:16", "n": "i32"}, constexprs={"BLOCK": 64},
                          options={"num_warps": 4, "num_stages": 3}, cc=90, triton_version="3.6.0")
CONFIG = {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}


def shipped(call: CallSpecialization = CALL, *, conflicts: dict[str, str] | None = None, **entry: Any) -> ShippedEntry:
    """An entry filed under the key the build gives ``call``'s declaration (ptxas 12.8), in an index of its own."""
    key = call.key(ptxas_version="12.8")
    fields = {"key_components": json.loads(canonical_json(key.components)), "signature": call.signature,
              "target": {"arch": call.target.arch, "cc": call.cc}, "triton_version": call.triton_version,
              "config": CONFIG, "autotune": {"key": [1024, "torch.float16"]}, **entry}
    index = Index(package="pkg", data_dir=Path("."), entries={key.hex: fields}, conflicts=conflicts or {})
    return ShippedEntry(index, key.hex, fields)


def test_the_entry_with_the_calls_key_is_found() -> None:
    other = shipped(dataclasses.replace(CALL, constexprs={"BLOCK": 128}))
    mine = shipped()
    assert lookup.find([other, mine], CALL) is mine


def test_the_calls_key_is_computed_per_ptxas_declaration_of_ones_and_distribution() -> None:
    """The lookup computes the call's key once per (ptxas version, declared type of each argument passed as 1,
    distribution) among the candidates, not once per candidate: candidates that differ in any of the three must
    still each be judged by their own key."""
    call = dataclasses.replace(CALL, signature={"x": "*fp16:16", "n": "i32:1"}, ones=("n",))

    def filed(ptxas: str, ones: str, dist: dict[str, str] | None, for_call: Any = call) -> ShippedEntry:
        key = for_call.key(ptxas_version=ptxas, declared={"n": ones}, distribution=dist)
        fields = {"key_components": json.loads(canonical_json(key.components)), "signature": {"n": ones},
                  "target": {"arch": call.target.arch, "cc": call.cc}, "triton_version": call.triton_version}
        return ShippedEntry(Index(package="pkg", data_dir=Path("."), entries={key.hex: fields}), key.hex, fields)

    pkg = {"name": "pkg", "version": "1.0"}
    variants = [filed(p, o, d) for p in ("12.8", "12.9") for o in ("i32:1", "i64:1") for d in (None, pkg)]
    assert len({v.key for v in variants}) == 8

    def dist_of(entry: dict[str, Any]) -> Any:  # as installed_distribution answers: the entry's own
        return entry["key_components"]["kernel"].get("distribution")

    # each candidate is judged by the key the call has under its own ptxas, declaration and distribution: every
    # one is found in any order among the others (a call passing 1 fits either declaration of it as ":1")
    for want in variants:
        others = [v for v in variants if v is not want]
        found, diffs = lookup.nearest([want, *others], call, distribution=dist_of)
        assert found is want and diffs == []
        found, diffs = lookup.nearest([*others, want], call, distribution=dist_of)
        assert found is others[0] and diffs == []
    # entries of another call first, one per triple: what the lookup computed for them must not stand for want's
    other_call = dataclasses.replace(call, constexprs={"BLOCK": 128})
    decoys = [filed(p, o, d, other_call) for p in ("12.8", "12.9") for o in ("i32:1", "i64:1") for d in (None, pkg)]
    for want in variants:
        found, diffs = lookup.nearest([*decoys, want], call, distribution=dist_of)
        assert found is want and diffs == []
    # and only by it: keyed without the distribution these candidates were built with, none answers the call
    found, diffs = lookup.nearest([v for v in variants if dist_of(v.entry)], call, distribution=lambda e: None)
    assert found is not None and any(d.startswith("kernel.distribution") for d in diffs), diffs


def test_a_miss_names_the_closest_entrys_differences_most_telling_first() -> None:
    call = dataclasses.replace(CALL, options={"num_warps": 8, "num_stages": 3}, cc=80)
    found = lookup.find([shipped()], call, explain=True)
    assert isinstance(found, list) and found[0].startswith("target.")
    assert "kernel.num_warps: call 8, index 4" in found
    assert lookup.find([shipped()], call) == []  # nothing explained unless asked


@pytest.mark.parametrize("target, arch", [
    (SimpleNamespace(backend="cuda", arch=90, warp_size=32), 90),
    (SimpleNamespace(backend="hip", arch="gfx942", warp_size=64), None),
    (None, None),
])
def test_only_an_nvidia_target_has_an_arch(target: Any, arch: int | None) -> None:
    assert lookup.cuda_arch(target) == arch


def test_a_call_for_another_target_is_a_miss_with_the_reason() -> None:
    found = lookup.before_compile([shipped()], SimpleNamespace(), SimpleNamespace(backend="hip", warp_size=64), {})
    assert isinstance(found, lookup.Miss) and "is not an NVIDIA GPU" in found.reason and not found.refused


def test_the_autotuner_gets_its_own_config_for_this_gpu_and_triton() -> None:
    ours = SimpleNamespace(kwargs={"BLOCK": 64}, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None)
    theirs = SimpleNamespace(**{**vars(ours), "num_warps": 8})
    (choice,) = lookup.autotune_choices([shipped()], [theirs, ours], arch=90, triton_version="3.6.0")
    assert isinstance(choice, lookup.Choice) and choice.config is ours and choice.key == (1024, "torch.float16")
    assert lookup.autotune_choices([shipped()], [ours], arch=80, triton_version="3.6.0") == []
    assert lookup.autotune_choices([shipped()], [ours], arch=90, triton_version="3.7.0") == []
    (miss,) = lookup.autotune_choices([shipped()], [theirs], arch=90, triton_version="3.6.0")
    assert isinstance(miss, lookup.Miss) and "is not among the autotuner's" in miss.reason and not miss.refused


def test_an_entry_chosen_for_several_keys_answers_each() -> None:
    """A recording measured the same configuration for two tuning keys: the one entry carries both
    (``autotune.also_keys``) and the autotuner gets its config under each."""
    ours = SimpleNamespace(kwargs={"BLOCK": 64}, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None)
    both = shipped(autotune={"key": [1024, "torch.float16"], "also_keys": [[4096, "torch.float16"]]})
    choices = lookup.autotune_choices([both], [ours], arch=90, triton_version="3.6.0")
    assert all(isinstance(c, lookup.Choice) for c in choices), choices
    assert [(c.key, c.config) for c in choices if isinstance(c, lookup.Choice)] == [
        ((1024, "torch.float16"), ours), ((4096, "torch.float16"), ours)]


def test_a_self_contradicting_index_chooses_nothing_and_says_so_as_a_refusal() -> None:
    entry = shipped()
    contradicting = shipped(conflicts={entry.key: "its cubin is also the cubin of entry 0123"})
    ours = SimpleNamespace(kwargs={"BLOCK": 64}, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None)
    (miss,) = lookup.autotune_choices([contradicting], [ours], arch=90, triton_version="3.6.0")
    assert isinstance(miss, lookup.Miss) and miss.refused and miss.shipped is contradicting


def test_the_compiled_kernel_must_be_the_one_the_entry_was_built_as() -> None:
    entry = {"triton_version": "3.6.0", "checks": {"name": "f", "shared": 0, "num_warps": 4, "num_ctas": 1,
                                                   "global_scratch_size": 0}}
    md = SimpleNamespace(triton_version="3.6.0", name="f", shared=0, num_warps=4, num_ctas=1, global_scratch_size=0)
    assert lookup.compiled_mismatch(md, entry) is None
    more_warps = SimpleNamespace(**{**vars(md), "num_warps": 8})
    assert lookup.compiled_mismatch(more_warps, entry) == "compiled kernel's num_warps is 8, entry says 4"
    other_triton = SimpleNamespace(**{**vars(md), "triton_version": "3.7.0"})
    assert lookup.compiled_mismatch(other_triton, entry) == "kernel compiled by Triton 3.7.0, entry by 3.6.0"
    unknown_shared = SimpleNamespace(**{**vars(md), "shared": None})
    assert lookup.compiled_mismatch(unknown_shared, entry) == "cannot check shared (kernel None, entry 0)"
