"""kbuild-nvcc on a real nvcc (13.x from the package index): the object it writes is the one its uncached run
writes, a second compile runs no cicc and no ptxas (and, in direct mode, no nvcc at all), the dependency file is
nvcc's own, per-architecture entries are shared across checkouts, and what it cannot read runs plain nvcc."""

from __future__ import annotations

import json
import shutil
import subprocess

from nvcc_helpers import ARCHS

from kbuild.cache.local import LocalBackend


def compile_args(out: str = "k.o", *extra: str) -> list[str]:
    return ["-c", "k.cu", "-o", out, "-O3", *ARCHS, *extra]


def test_second_compile_runs_no_cicc_no_ptxas_and_writes_the_same_object(nvcc, launcher, cu):
    first = launcher(nvcc, *compile_args("a.o"), cwd=cu)
    assert first.returncode == 0, first.stderr
    assert first.count("cicc", "stored") == 2 and first.count("ptxas", "stored") == 2
    # another output name: the direct mode misses (another invocation), the per-step entries answer
    second = launcher(nvcc, *compile_args("b.o"), cwd=cu)
    assert second.returncode == 0, second.stderr
    assert second.count("cicc", "hit") == 2 and second.count("ptxas", "hit") == 2
    assert not [e for e in second.events if e["tool"] in ("cicc", "ptxas") and e["action"] != "hit"]
    uncached = launcher(nvcc, *compile_args("c.o"), cwd=cu, env={"KBUILD_NVCC_CACHE": "off"})
    assert uncached.returncode == 0 and uncached.count("cicc", "uncached") == 2
    a, b, c = ((cu / n).read_bytes() for n in ("a.o", "b.o", "c.o"))
    assert a == b == c


def test_direct_mode_answers_an_unchanged_compile_without_running_its_steps_and_misses_after_an_edit(nvcc, launcher, cu):
    args = compile_args("k.o", "-MD", "-MT", "k.o", "-MF", "k.d")
    assert launcher(nvcc, *args, cwd=cu).returncode == 0
    obj, deps = (cu / "k.o").read_bytes(), (cu / "k.d").read_text()
    (cu / "k.o").unlink()
    (cu / "k.d").unlink()
    again = launcher(nvcc, *args, cwd=cu)
    assert again.returncode == 0
    assert again.count("nvcc", "direct-hit") == 1
    assert {e["tool"] for e in again.events} == {"nvcc"}  # nothing but nvcc's --dryrun (the key) ran
    assert (cu / "k.o").read_bytes() == obj and (cu / "k.d").read_text() == deps
    # an edit of the source: no direct answer, the unit compiles, cicc runs again for both architectures
    (cu / "k.cu").write_text((cu / "k.cu").read_text().replace("2.f * v", "3.f * v"))
    edited = launcher(nvcc, *args, cwd=cu)
    assert edited.count("nvcc", "direct-hit") == 0 and edited.count("cicc", "stored") == 2
    assert (cu / "k.o").read_bytes() != obj


def test_a_header_edit_is_seen_by_the_direct_mode(nvcc, launcher, cu):
    (cu / "scale.h").write_text("#define SCALE 2.f\n")
    (cu / "k.cu").write_text('#include "scale.h"\n' + (cu / "k.cu").read_text().replace("2.f * v", "SCALE * v"))
    args = compile_args("k.o")
    assert launcher(nvcc, *args, cwd=cu).returncode == 0
    before = (cu / "k.o").read_bytes()
    (cu / "scale.h").write_text("#define SCALE 4.f\n")
    after = launcher(nvcc, *args, cwd=cu)
    assert after.count("nvcc", "direct-hit") == 0 and after.count("cicc", "stored") == 2
    assert (cu / "k.o").read_bytes() != before
    # and back: the first manifest (slot 0) answers again
    (cu / "scale.h").write_text("#define SCALE 2.f\n")
    back = launcher(nvcc, *args, cwd=cu)
    assert back.count("nvcc", "direct-hit") == 1
    assert (cu / "k.o").read_bytes() == before


def test_dependency_file_is_the_one_nvcc_writes(nvcc, launcher, cu):
    dep_args = ["-MD", "-MT", "obj.o", "-MF"]
    subprocess.run([nvcc, *compile_args("plain.o"), *dep_args, "plain.d"], cwd=cu, check=True)
    assert launcher(nvcc, *compile_args("mine.o"), *dep_args, "mine.d", cwd=cu).returncode == 0
    assert (cu / "mine.d").read_text() == (cu / "plain.d").read_text()


def test_per_architecture_entries_are_shared_across_checkouts(nvcc, launcher, cu, tmp_path):
    assert launcher(nvcc, *compile_args(), cwd=cu).returncode == 0
    other = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(cu, other)
    (other / "k.o").unlink()
    moved = launcher(nvcc, *compile_args(), cwd=other)
    assert moved.returncode == 0
    # the same arguments, but another source path: nvcc's module id (in the object's symbols) differs, so the
    # direct mode must not answer with the first checkout's object
    assert moved.count("nvcc", "direct-hit") == 0
    # the reference: the same compile there with nothing from the store (plain nvcc's own objects name its
    # random temporary files, so they differ from run to run and cannot be the reference)
    assert launcher(nvcc, *compile_args("ref.o"), cwd=other, env={"KBUILD_NVCC_CACHE": "off"}).returncode == 0
    assert (other / "k.o").read_bytes() == (other / "ref.o").read_bytes() != (cu / "k.o").read_bytes()
    # the source path differs (and with it nvcc's module id), yet cicc's PTX for each architecture is reused
    # where the outputs do not name them; ptxas's cubins always (keyed by the PTX)
    assert moved.count("ptxas", "hit") == 2
    assert moved.count("cicc", "hit") + moved.count("cicc", "stored") == 2
    assert (other / "k.o").is_file()


def test_missing_nvcc_is_one_line_and_status_2(launcher, cu):
    res = launcher("/nonexistent/bin/nvcc", "-c", "k.cu", cwd=cu)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "nvcc '/nonexistent/bin/nvcc' not found" in res.stderr
    assert not (cu / "k.o").exists()


def test_no_nvcc_at_all_is_a_usage_error(launcher, cu):
    res = launcher(cwd=cu)
    assert res.returncode == 2 and "no nvcc given" in res.stderr


def test_a_flag_nvcc_rejects_fails_as_nvcc_fails_and_writes_nothing(nvcc, launcher, cu):
    res = launcher(nvcc, *compile_args(), "--no-such-flag", cwd=cu)
    assert res.returncode != 0
    assert "no-such-flag" in res.stderr  # nvcc's own message
    assert not (cu / "k.o").exists()
    assert launcher.store.exists() is False or not any(e["action"] == "stored" for e in res.events)


def test_a_flag_the_launcher_cannot_honour_runs_plain_nvcc_with_one_warning(nvcc, launcher, cu):
    res = launcher(nvcc, *compile_args(), "--keep", cwd=cu)
    assert res.returncode == 0
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("kbuild-nvcc: warning")]
    assert len(warnings) == 1 and "--keep" in warnings[0]
    assert res.count("nvcc", "plain") == 1 and (cu / "k.o").is_file()


def test_mmd_runs_plain_nvcc_with_a_warning(nvcc, launcher, cu):
    res = launcher(nvcc, *compile_args(), "-MMD", "-MT", "k.o", "-MF", "k.d", cwd=cu)
    assert res.returncode == 0
    assert "kbuild-nvcc: warning: running plain nvcc" in res.stderr and "-MMD" in res.stderr
    assert (cu / "k.d").is_file() and (cu / "k.o").is_file()


def test_a_host_only_invocation_runs_plain_nvcc_quietly(nvcc, launcher, cu):
    res = launcher(nvcc, "--version", cwd=cu)
    assert res.returncode == 0 and "Cuda compilation tools" in res.stdout
    assert "warning" not in res.stderr


def test_a_compile_error_is_nvccs_and_stores_nothing(nvcc, launcher, cu):
    (cu / "k.cu").write_text("__global__ void broken( { }\n")
    res = launcher(nvcc, *compile_args(), cwd=cu)
    assert res.returncode != 0 and "error" in res.stderr
    assert not (cu / "k.o").exists()
    assert not [e for e in res.events if e["action"] in ("stored", "direct-stored")]


def test_a_corrupt_store_entry_is_a_miss_not_a_wrong_object(nvcc, launcher, cu):
    assert launcher(nvcc, *compile_args("a.o"), cwd=cu).returncode == 0
    good = (cu / "a.o").read_bytes()
    # damage every non-empty blob in the store: each lookup must fail its digest check and the steps run again
    backend = LocalBackend(launcher.store)
    damaged = 0
    digests = {json.loads(backend.get_record(k) or b"{}").get("cubin_sha256") for k in backend.record_keys()}
    for digest in digests:  # once each: records share a blob when their bytes are the same
        blob = backend.get_blob(digest) if digest else None
        if blob:
            backend._blobs.set(digest, bytes([blob[0] ^ 0xFF]) + blob[1:])
            damaged += 1
    backend.close()
    assert damaged >= 6  # cudafe++, 2 x cicc (ptx + side files), 2 x ptxas, the object
    res = launcher(nvcc, *compile_args("b.o"), cwd=cu)
    assert res.returncode == 0
    assert not [e for e in res.events if e["action"] in ("hit", "direct-hit")]
    assert res.count("cicc", "stored") + res.count("cicc", "run") + res.count("cicc", "uncached") == 2
    assert (cu / "b.o").read_bytes() == good


def test_torch_build_extension_flags_are_handled_without_fallback(nvcc, launcher, cu):
    """The flags torch's BuildExtension passes nvcc in its ninja build (``PYTORCH_NVCC="kbuild-nvcc nvcc"``): the
    dependency file without -MT (nvcc names the -o output), host options, relaxed constexpr, half operators off."""
    flags = ["--generate-dependencies-with-compile", "--dependency-output", "{d}", "-c", "k.cu", "-o", "{o}",
             "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr",
             "--compiler-options", "'-fPIC'", "-O3", "-std=c++17", *ARCHS]
    def fill(d, o):
        return [a.format(d=d, o=o) for a in flags]
    (cu / "build").mkdir()
    subprocess.run([nvcc, *fill("plain.d", "build/plain.o")], cwd=cu, check=True)
    res = launcher(nvcc, *fill("mine.d", "build/plain.o"), cwd=cu)
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    assert res.count("cicc", "stored") == 2
    assert (cu / "mine.d").read_text() == (cu / "plain.d").read_text()


#: internal linkage: nvcc names the device function after the unit's module id (``_ZN..._INTERNAL_<id>...``),
#: which it derives from the source's path
INTERNAL = """
namespace { __device__ float twice(float v) { return 2.f * v; } }
static __device__ __noinline__ float thrice(float v) { return 3.f * v; }
extern "C" __global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = twice(x[i]) + thrice(x[i]);
}
"""


def test_a_unit_with_internal_linkage_device_code_is_reused_across_checkouts(nvcc, launcher, cu, tmp_path):
    (cu / "k.cu").write_text(INTERNAL)
    first = launcher(nvcc, *compile_args(), cwd=cu)
    assert first.returncode == 0, first.stderr
    other = tmp_path / "elsewhere" / "checkout"  # the same file name: the module id keeps its length
    shutil.copytree(cu, other)
    (other / "k.o").unlink()
    moved = launcher(nvcc, *compile_args(), cwd=other)
    assert moved.returncode == 0, moved.stderr
    # the module id differs between the checkouts and is in the PTX and the cubins, yet both steps are answered
    # (stored with the id as a same-length placeholder, the moved unit's id written back) ...
    assert moved.count("cicc", "hit") == 2 and moved.count("ptxas", "hit") == 2
    # ... and the object is byte for byte the one an uncached compile there writes, which is not the first one's
    assert launcher(nvcc, *compile_args("ref.o"), cwd=other, env={"KBUILD_NVCC_CACHE": "off"}).returncode == 0
    ref = (other / "ref.o").read_bytes()
    assert (other / "k.o").read_bytes() == ref != (cu / "k.o").read_bytes()
    assert b"_INTERNAL_" in ref
    # a unit in a file of another name has a module id of another length: compiled, not relocated
    (other / "kk.cu").write_text(INTERNAL)
    renamed = launcher(nvcc, "-c", "kk.cu", "-o", "kk.o", "-O3", *ARCHS, cwd=other)
    assert renamed.returncode == 0 and renamed.count("ptxas", "hit") == 0
