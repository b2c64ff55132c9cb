#!/usr/bin/env bash
# Issue 17 on the H200 in one device call (about 7 minutes; benchmarks/gpu_session.md items 4 and 8):
#
#   1. benchmarks/gpu_cuda_example.py: examples/cuda-cmake built through kbuild-nvcc (tune off), every kernel
#      checked against torch and timed (its first run on a GPU);
#   2. benchmarks/gpu_cuda_tune.py: the three kernels' sm_90 SASS tuned, verified and timed again in a fresh worker;
#   3. the example wheel built through kbuild's backend with tune = "auto" (KBUILD_STORE in $WORK, 100 evaluations /
#      WHEEL_TUNE_S s per kernel; units compiled one at a time so that no two tuners share the GPU), then
#      `kbuild inspect --json` of it, the manifest's cubin digests against the cubins the extension carries
#      (cuobjdump), and a second build from a fresh build directory (same store: tuned hits, same bytes?).
#
# Run from the repository root on the GPU machine, after the wheel install line of the device README (the `.whl`
# folder: diskcache, gymnasium, stable-baselines3, sb3-contrib, optuna + deps; torch, triton, cmake, ninja and
# scikit-build-core are the image's):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site || exit; bash benchmarks/gpu_cuda_session.sh
#
# nvcc: the image's (nvcc on PATH, else /usr/local/cuda/bin/nvcc; NVCC=... to choose). The package-index toolkit
# (nvidia-cuda-nvcc + nvidia-nvvm 13.5: 47 + 75 MB of wheels) does not fit the 64 MiB carry.
# Outputs in $OUT (at most 8 files come back): session.log, summary.txt, gpu_cuda_example.json, gpu_cuda_tune.json,
# cuda_manifest.json, cuda_wheel.tar.gz (build logs, kbuild-nvcc step logs, both wheels, kbuild inspect's table).
# DRY_RUN=1: the same steps on a CPU machine (1 and 2 in their --dry-run modes, 3 ships baselines). Done on CPU with
# the package index's nvcc 13.0.88 (NVCC=.../nvidia/cu13/bin/nvcc; its 13.0 wheels need a lib64 -> lib link, which
# the image's toolkit has): 60 s on 2 cores, 6 baseline entries whose digests are the extension's cubins, second
# build byte-identical from 3 direct hits.
# STEPS (123: which steps run), WHEEL_CAP_S (240: the first wheel build's limit), CALL_S (540), TUNE_S (40), TUNE_EVALS (150), WHEEL_TUNE_S (40), WHEEL_EVALS (100) override the defaults.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The checkout imports like the installed wheel (kbuild.hooks, kbuild.cache, kbuild.templates: links, git-ignored).
for d in hooks cache templates; do [ -e "kbuild/$d" ] || ln -s "../$d" "kbuild/$d"; done
OUT=${OUT:-/tmp/kbuild-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
CALL_S=${CALL_S:-540}
STEPS=${STEPS:-123}  # which of the three steps run (STEPS=3: only the tuned wheel)
DRY=${DRY_RUN:-0}
T0=$(date +%s)
left() { echo $(( CALL_S - ($(date +%s) - T0) )); }
cap() { local l; l=$(left); if [ "$1" -lt $(( l - 20 )) ]; then echo "$1"; else echo $(( l > 40 ? l - 20 : 20 )); fi; }
PY=$(command -v "${PYTHON:-python3}")
WORK=$(mktemp -d /tmp/kbuild-cuda.XXXXXX)
mkdir -p "$WORK/bin" "$WORK/wheel"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SOURCE_DATE_EPOCH=1700000000 PIP_NO_INDEX=1
# kbuild-nvcc, the console script an installed kbuild has, onto the checkout (CMake finds it on PATH)
printf '#!/bin/sh\nexec "%s" -c "import sys; from kbuild.nvcc.launcher import main; sys.exit(main())" "$@"\n' \
  "$PY" > "$WORK/bin/kbuild-nvcc"
chmod +x "$WORK/bin/kbuild-nvcc"
export PATH="$WORK/bin:$PATH"
NVCC=${NVCC:-$(command -v nvcc || true)}
[ -n "$NVCC" ] || for c in /usr/local/cuda/bin/nvcc /usr/local/cuda-13.0/bin/nvcc; do [ -x "$c" ] && NVCC=$c && break; done
[ -n "$NVCC" ] || { echo "no nvcc on PATH or in /usr/local/cuda; set NVCC"; exit 2; }

echo "== preflight"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader || true
"$NVCC" --version | tail -2
cmake --version | head -1; ninja --version
"$PY" - <<'PY' || { echo "preflight imports failed"; exit 2; }
import sys, importlib.metadata as md
import kbuild, kbuild.hooks.backend, diskcache  # noqa: F401  the checkout, the backend, the store's one wheel
print("python", sys.version.split()[0], {n: md.version(n) for n in ("torch", "triton", "scikit-build-core")})
try:
    import gymnasium, optuna, sb3_contrib, stable_baselines3  # noqa: F401
except ImportError as exc:
    print("warning: the tune extra is incomplete:", exc)
PY
rc=()

dry=(); [ "$DRY" = 1 ] && dry=(--dry-run)
if [[ $STEPS == *1* ]]; then
echo "== 1 gpu_cuda_example ($(left) s left)"
t=$(date +%s)
timeout "$(cap 150)" "$PY" benchmarks/gpu_cuda_example.py --nvcc "$NVCC" --out "$OUT/gpu_cuda_example.json" "${dry[@]}"
rc+=("example=$? $(( $(date +%s) - t ))s")
fi

if [[ $STEPS == *2* ]]; then
echo "== 2 gpu_cuda_tune ($(left) s left)"
t=$(date +%s)
timeout "$(cap 240)" "$PY" benchmarks/gpu_cuda_tune.py --nvcc "$NVCC" --seconds "${TUNE_S:-40}" \
  --evaluations "${TUNE_EVALS:-150}" --out "$OUT/gpu_cuda_tune.json" "${dry[@]}"
rc+=("tune=$? $(( $(date +%s) - t ))s")
fi

echo "== 3 example wheel, tune = auto ($(left) s left)"
t=$(date +%s)
mkdir -p "$WORK/project"
cp -r examples/cuda-cmake/. "$WORK/project/"
rm -rf "$WORK/project/build"
wheel_build() {  # wheel_build NAME SECONDS: one pip wheel of the example into $WORK/wheel/dist-NAME
  local name=$1
  KBUILD_STORE="$WORK/store" KBUILD_TUNE=auto KBUILD_BUDGET_EVALUATIONS="${WHEEL_EVALS:-100}" \
  KBUILD_BUDGET_SECONDS="${WHEEL_TUNE_S:-40}" KBUILD_NVCC_LOG="$WORK/wheel/steps-$name.jsonl" \
  CMAKE_BUILD_PARALLEL_LEVEL=1 \
    timeout "$2" "$PY" -m pip wheel --no-deps --no-build-isolation -v -w "$WORK/wheel/dist-$name" "$WORK/project" \
      -C "cmake.define.CMAKE_CUDA_COMPILER=$NVCC" -C "build-dir=$WORK/build-$name" > "$WORK/wheel/build-$name.log" 2>&1
  local status=$?
  grep -E "^ *kbuild(-nvcc)?:" "$WORK/wheel/build-$name.log" | sort | uniq -c | head -20
  [ $status = 0 ] || { tail -40 "$WORK/wheel/build-$name.log"; echo "wheel build $name failed ($status)"; }
  return $status
}
if wheel_build first "$(cap "${WHEEL_CAP_S:-240}")"; then
  whl=$(ls "$WORK"/wheel/dist-first/*.whl)
  "$PY" -m kbuild inspect --json "$whl" > "$OUT/cuda_manifest.json" 2> "$WORK/wheel/inspect-json.err"
  "$PY" -m kbuild inspect "$whl" > "$WORK/wheel/inspect.txt" 2>&1
  cat "$WORK/wheel/inspect.txt"
  wheel_build second "$(cap 90)"
  rc+=("wheel=0 second=$? $(( $(date +%s) - t ))s")
else
  rc+=("wheel=failed $(( $(date +%s) - t ))s")
fi

echo "== summary ($(left) s left)"
"$PY" - "$OUT" "$WORK/wheel" "${rc[@]}" <<'PY' | tee "$OUT/summary.txt"
import hashlib, json, subprocess, sys, tempfile, zipfile
from pathlib import Path

out, wheel_dir, rcs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
print("exit status / seconds:", "; ".join(rcs))
ex = load("gpu_cuda_example.json")
if ex is None:
    print("1 example: no result")
elif ex.get("dry_run"):
    print(f"1 example (dry run): built {ex['extension']}, steps {ex['build_steps']}")
else:
    print(f"1 example: all correct {ex['all_ok']} on {ex['gpu']}; build steps {ex['build_steps']}")
    for r in ex["rows"]:
        peer = r.get("cublas_ms", r.get("torch_ms"))
        print(f"   {r['kernel']:<22}{r['n']:>10} {'ok' if r['ok'] else 'WRONG':>5} {r['ms']:9.4f} ms  peer {peer:9.4f} ms")
tu = load("gpu_cuda_tune.json")
print("2 tune:" + (" no result" if tu is None else f" {tu['seconds']} s{' (dry run)' if tu['dry_run'] else ''}"))
for r in (tu or {}).get("kernels", []):
    if "error" in r:
        print(f"   {r['kernel']:<8} error: {r['error'][:150]}")
        continue
    chk = r.get("verify", {}).get("check", {})
    print(f"   {r['kernel']:<8} evals {r.get('evaluations')} accepted {r['accepted']} claimed {r.get('claimed_speedup')} "
          f"measured {r.get('measured_speedup')} check {chk.get('valid')}  {str(r.get('decision'))[:70]}")
man = load("cuda_manifest.json")
first = sorted((wheel_dir / "dist-first").glob("*.whl"))
second = sorted((wheel_dir / "dist-second").glob("*.whl"))
if man is None or not first:
    print("3 wheel: no manifest")
else:
    cuda = man.get("cuda_kernels") or man.get("manifest", {}).get("cuda_kernels") or []
    carried = set()
    try:  # the cubins the extension really carries
        from kbuild.toolchain import tool_path
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(first[0]) as zf:
            (so,) = [n for n in zf.namelist() if n.endswith(".so")]
            (Path(tmp) / "ext.so").write_bytes(zf.read(so))
            subprocess.run([str(tool_path("cuobjdump")), "-xelf", "all", "ext.so"], cwd=tmp, check=True,
                           capture_output=True)
            carried = {hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(tmp).glob("*.cubin")}
    except Exception as exc:
        print("   cuobjdump failed:", exc)
    print(f"3 wheel: {first[0].name}; {len(cuda)} CUDA entries")
    for e in cuda:
        print(f"   {e['kernel']:<8}{e['target']:<7}{e['state']:<14}speedup {e.get('speedup')}  ptxas {e.get('ptxas')}  "
              f"cubin in extension: {e['cubin_sha256'] in carried}")
    steps = {}
    for line in (wheel_dir / "steps-second.jsonl").read_text().splitlines() if (wheel_dir / "steps-second.jsonl").exists() else []:
        ev = json.loads(line)
        steps[f"{ev['tool']}:{ev['action']}"] = steps.get(f"{ev['tool']}:{ev['action']}", 0) + 1
    print(f"   second build: {'byte-identical' if second and second[0].read_bytes() == first[0].read_bytes() else 'DIFFERENT or missing'}"
          f"; steps {steps}")
PY
tar czf "$OUT/cuda_wheel.tar.gz" -C "$WORK" wheel
echo "done in $(( $(date +%s) - T0 )) s; outputs: $(ls "$OUT" | tr '\n' ' ')"
sleep 1  # let tee write the last lines
