"""Issue 32, the real CUDA extension: ``--threads N`` runs the plan's independent steps N at a time through the
cached path (it used to run plain nvcc, uncached, with a warning per unit), and two builds of a unit from two empty
stores write byte-identical objects, also for a unit whose nvcc module id carried ``cudafe++``'s process id."""

from __future__ import annotations

import subprocess

import pytest
from nvcc_helpers import Result, Runner

GENCODES = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
            "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]

#: no external function or variable: nvcc 13's module id for it ends in cudafe++'s process id
STATIC_ONLY = r"""
namespace { __device__ float twice(float v) { return 2.f * v; } }
static __global__ void scale(float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = twice(y[i]);
}
static void launch(float *y, int n) { scale<<<(n + 255) / 256, 256>>>(y, n); }
static void (*const used)(float *, int) __attribute__((used)) = launch;
"""


def most_at_once(res: Result, tools: tuple[str, ...] = ("gcc", "cudafe++", "cicc", "ptxas")) -> int:
    """The most steps of ``tools`` that ran at the same time (from the step log's start and seconds)."""
    edges = []
    for e in res.events:
        if e["tool"] in tools and "start" in e and e["action"] in ("run", "stored", "uncached"):
            edges += [(e["start"], 1), (e["start"] + e["seconds"], -1)]
    now = best = 0
    for _, d in sorted(edges, key=lambda x: (x[0], x[1])):
        now += d
        best = max(best, now)
    return best


@pytest.mark.hostile(fault="nvcc --threads", outcome="served correct bytes")
def test_threads_run_the_architectures_in_parallel_through_the_cache(nvcc, launcher, cu, tmp_path):
    args = ["-c", "k.cu", "-O3", *GENCODES]
    first = launcher(nvcc, *args, "-o", "a.o", "--threads", "3", cwd=cu)
    assert first.returncode == 0, first.stderr
    assert "warning" not in first.stderr and first.count("nvcc", "plain") == 0
    assert first.count("cicc", "stored") == 3 and first.count("ptxas", "stored") == 3
    assert 2 <= most_at_once(first, ("cicc",)) <= 3  # the three cicc steps overlap
    # the object is the one a sequential, uncached compile writes
    ref = launcher(nvcc, *args, "-o", "ref.o", cwd=cu, env={"KBUILD_NVCC_CACHE": "off"})
    assert ref.returncode == 0 and most_at_once(ref) == 1
    assert (cu / "a.o").read_bytes() == (cu / "ref.o").read_bytes()
    # a second compile (another output: no direct answer) is answered step by step
    second = launcher(nvcc, *args, "-o", "b.o", "-t3", cwd=cu)
    assert second.count("cicc", "hit") == 3 and second.count("ptxas", "hit") == 3
    assert (cu / "b.o").read_bytes() == (cu / "ref.o").read_bytes()
    # the bound holds: from another empty store, never more than 2 steps at once
    bounded = Runner(tmp_path / "store2", tmp_path / "steps2.jsonl")(nvcc, *args, "-o", "c.o", "--threads=2", cwd=cu)
    assert bounded.returncode == 0 and bounded.count("cicc", "stored") == 3
    assert most_at_once(bounded) == 2
    assert (cu / "c.o").read_bytes() == (cu / "ref.o").read_bytes()


@pytest.mark.hostile(fault="non-reproducible cold build", outcome="served correct bytes")
@pytest.mark.parametrize("extra", [[], ["--threads", "2"], ["-g"]])
def test_two_builds_from_two_empty_stores_are_byte_identical(nvcc, cu, tmp_path, extra):
    """-g: the host object's debug information named the launcher's random temporary directory."""
    (cu / "k.cu").write_text(STATIC_ONLY)
    args = ["-c", "k.cu", "-o", "k.o", "-O3", *GENCODES, *extra]
    objects: list[bytes] = []
    for n in (1, 2):
        res = Runner(tmp_path / f"store{n}", tmp_path / f"steps{n}.jsonl")(nvcc, *args, cwd=cu)
        assert res.returncode == 0, res.stderr
        objects.append((cu / "k.o").read_bytes())
        (cu / "k.o").unlink()
        (pinned,) = [e["module_id_pinned"] for e in res.events if e["tool"] == "cudafe++"]
    assert objects[0] == objects[1]
    assert pinned.encode() in objects[0]  # the module id with the unit's suffix, not a process id
    # and from a warm store (the steps answered, not run): the same bytes again
    warm = Runner(tmp_path / "store1", tmp_path / "steps3.jsonl")(nvcc, *args[:3], "k2.o", *args[4:], cwd=cu)
    assert warm.count("cudafe++", "hit") == 1 and (cu / "k2.o").read_bytes() == objects[0]


def test_a_unit_with_an_external_symbol_keeps_nvccs_own_module_id(nvcc, launcher, cu):
    """Only a process id is replaced: a module id nvcc made from the unit's first external symbol stays as it is."""
    res = launcher(nvcc, "-c", "k.cu", "-o", "k.o", "-arch=sm_80", cwd=cu)
    assert res.returncode == 0
    (cudafe,) = [e for e in res.events if e["tool"] == "cudafe++"]
    assert "module_id_pinned" not in cudafe


def test_plain_nvcc_is_not_reproducible_for_that_unit(nvcc, cu):
    """The reason for the replacement: nvcc itself (with --keep, so that temporary names are fixed) writes two
    different objects for the same unit, because cudafe++ puts its process id in the module id."""
    (cu / "k.cu").write_text(STATIC_ONLY)
    out = []
    for n in (1, 2):
        keep = cu / f"keep{n}"
        keep.mkdir()
        subprocess.run([nvcc, "-c", "k.cu", "-o", f"k{n}.o", "-arch=sm_80", "--keep", "--keep-dir", keep.name],
                       cwd=cu, check=True, capture_output=True)
        out.append(((cu / f"k{n}.o").read_bytes(), (keep / "k.module_id").read_text()))
    assert out[0][1] != out[1][1] and out[0][0] != out[1][0]
