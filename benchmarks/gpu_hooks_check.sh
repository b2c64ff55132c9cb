#!/usr/bin/env bash
# The build hooks on a GPU machine (issue 7): build examples/cmake-extension into a wheel with the
# backend hook, install it, run its three kernels through the C extension and check them against
# torch (and Triton's JIT launch of the same functions), from several threads; then check the
# clear error for a GPU the wheel has no cubin for (an sm_80-only build on an sm_90 GPU), a matmul
# variant that needs > 48 KB of dynamic shared memory, and that a rebuild is byte-identical.
#
# Needs: python3 with torch, triton 3.6, scikit-build-core, cmake, gcc; no network. Wheels the
# image lacks (diskcache) come from .whl/ (../shared/tools/device-wheels), carried along:
#   device run (carry [".whl"]):  bash benchmarks/gpu_hooks_check.sh
# Results: $OUT/gpu_hooks_check.json, $OUT/gpu_hooks_check_*.json, $OUT/manifest.json, $OUT/gpu_hooks_check.log
# TUNE=1 adds stage 5: build with tune = auto and a small budget (TUNE_ONLY=k1,k2: only these kernels keep their
# bench specs in a copy of the example, the others ship baselines; $OUT/build_tuned.log and $OUT/tune_reports.json
# keep the build's log and the store's records of what shipped) (TUNE_EVALS=100, TUNE_SECONDS=50 per
# kernel; the matmul's space shares both between its two levels), aimed at < 4 minutes for the three kernels
# on the H200, then run the tuned wheel beside the baseline wheel: each kernel bit for bit against its
# shipped configuration's untouched compile (the baseline wheel, or Triton's JIT of a tuned config that is
# not the default), measured vs claimed speedup and gains, interleaved with an L2 flush
# ($OUT/gpu_hooks_check_tuned.json, $OUT/manifest_tuned.json, $OUT/compare_plan.json).
# DRY_RUN=1: no GPU needed: syntax, the helper's import, and its --dry-run on a manifest of an untuned
# build of the example (kbuild emit on this machine's CPU), then exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/kbuild-gpu-out}; mkdir -p "$OUT"
if [ "${DRY_RUN:-0}" = 1 ]; then  # the CPU path: the helper's non-GPU parts, against a real manifest
  PY=${PYTHON:-python3}
  DRY=$(mktemp -d /tmp/kbuild-gpu-dry.XXXXXX)
  KBUILD_STORE="$DRY/store" KBUILD_TUNE=off "$PY" -m kbuild emit --config examples/cmake-extension/pyproject.toml \
    --out-dir "$DRY/emit" --targets sm_90 > /dev/null
  "$PY" benchmarks/gpu_hooks_check.py --dry-run "$DRY/emit/kbuild.json" --target sm_90 | tee "$OUT/compare_plan.json"
  exit 0
fi
exec > >(tee "$OUT/gpu_hooks_check.log") 2>&1
WORK=$(mktemp -d /tmp/kbuild-gpu.XXXXXX)
PY=${PYTHON:-python3}
pipq() { "$PY" -m pip -q --disable-pip-version-check "$@"; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
"$PY" -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"

# kbuild itself, offline, plus the pure-Python wheels the image lacks.
if compgen -G ".whl/*.whl" >/dev/null; then pipq install --no-index --no-deps --target "$WORK/site" .whl/*.whl; fi
pipq install --no-deps --no-build-isolation --no-index --target "$WORK/site" .
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
# Stages 1-4 check the launchers, not the tuner: tune = off (stage 5, TUNE=1, tunes).
export KBUILD_STORE="$WORK/store" SOURCE_DATE_EPOCH=1700000000 KBUILD_TUNE=off

build() {  # build <project dir> <dist dir> [pip args...]
  local project=$1 dist=$2; shift 2
  local t0 log="$dist.log"
  t0=$(date +%s%N)
  if ! "$PY" -m pip wheel --disable-pip-version-check --no-deps --no-build-isolation --no-index -v -w "$dist" \
      "$project" "$@" > "$log" 2>&1; then
    tail -60 "$log"; echo "BUILD FAILED: $project"; exit 1
  fi
  grep -E "^ *kbuild" "$log" || true
  echo "built $(ls "$dist"/*.whl) in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

STAGES=${STAGES:-"1 2 3 4$([ "${TUNE:-0}" = 1 ] && echo " 5")"}  # e.g. STAGES="1 5"
on() { case " $STAGES " in *" $1 "*) return 0;; *) return 1;; esac; }
status=0

echo "== 1. the example wheel (sm_80 + sm_90), installed and run"
cp -r examples/cmake-extension "$WORK/project"
build "$WORK/project" "$WORK/dist"
# (kbuild commands run from $WORK: in the checkout, `python -m kbuild` would import the source tree)
(cd "$WORK" && "$PY" -m kbuild inspect "$WORK"/dist/*.whl --json > "$OUT/manifest.json" \
   && "$PY" -m kbuild inspect "$WORK"/dist/*.whl)
pipq install --no-deps --no-index --target "$WORK/demo" "$WORK"/dist/*.whl
(cd "$WORK" && PYTHONPATH="$WORK/demo:$PYTHONPATH" "$PY" "$ROOT/benchmarks/gpu_hooks_check.py" \
   --out "$OUT/gpu_hooks_check.json") || status=1

if on 2; then
echo "== 2. a rebuild from another directory is byte-identical (kbuild verify-wheel)"
cp -r examples/cmake-extension "$WORK/elsewhere"
(cd "$WORK" && "$PY" -m kbuild verify-wheel "$WORK"/dist/*.whl --project "$WORK/elsewhere") || status=1
fi

if on 3; then
echo "== 3. an sm_80-only wheel on this GPU: a clear error, no crash"
build "$WORK/project" "$WORK/dist80" -C kbuild.targets=sm_80
pipq install --no-deps --no-index --target "$WORK/demo80" "$WORK"/dist80/*.whl
(cd "$WORK" && PYTHONPATH="$WORK/demo80:$PYTHONPATH" "$PY" "$ROOT/benchmarks/gpu_hooks_check.py" \
   --expect-no-cubin --out "$OUT/gpu_hooks_check_no_cubin.json") || status=1
fi

if on 4; then
echo "== 4. a matmul that needs 64 KB of dynamic shared memory (opt-in above 48 KB)"
cp -r examples/cmake-extension "$WORK/bigsmem"
# (the declared space must hold the default: BLOCK_K 128 joins it; num_stages 4 is in it already)
sed -i 's/BLOCK_K = 64, GROUP_M = 8/BLOCK_K = 128, GROUP_M = 8/; 0,/num_stages = 3/s//num_stages = 4/; s/BLOCK_K = \[32, 64\]/BLOCK_K = [32, 64, 128]/' \
  "$WORK/bigsmem/pyproject.toml"
grep -q 'BLOCK_K = \[32, 64, 128\]' "$WORK/bigsmem/pyproject.toml" || { echo "stage 4: the space edit did not apply"; exit 1; }
build "$WORK/bigsmem" "$WORK/distbig"
pipq install --no-deps --no-index --target "$WORK/demobig" "$WORK"/distbig/*.whl
(cd "$WORK" && PYTHONPATH="$WORK/demobig:$PYTHONPATH" "$PY" "$ROOT/benchmarks/gpu_hooks_check.py" --no-timing \
   --pyproject "$WORK/bigsmem/pyproject.toml" --out "$OUT/gpu_hooks_check_bigsmem.json") || status=1
fi

if on 5; then
  echo "== 5. tune = auto with a small budget: the tuned wheel against the baseline wheel, side by side"
  t5=$(date +%s)
  tuned_project="$WORK/project"
  if [ -n "${TUNE_ONLY:-}" ]; then  # the others' bench specs dropped, so they ship baselines and the budget is theirs
    cp -r examples/cmake-extension "$WORK/project_only"
    "$PY" - "$WORK/project_only/pyproject.toml" "$TUNE_ONLY" <<'PY'
import re, sys
path, keep = sys.argv[1], set(sys.argv[2].split(","))
blocks = re.split(r"(?m)^(?=\[\[tool\.kbuild\.kernels\]\])", open(path).read())
out = [b if re.search(r'(?m)^name = "(%s)"' % "|".join(map(re.escape, keep)), b) else
       re.sub(r"(?m)^bench = .*\n", "", b) for b in blocks]
open(path, "w").write("".join(out))
PY
    grep -c '^bench = ' "$WORK/project_only/pyproject.toml" | xargs echo "stage 5: bench specs kept (TUNE_ONLY=$TUNE_ONLY):"
    tuned_project="$WORK/project_only"
  fi
  KBUILD_TUNE=auto KBUILD_BUDGET_EVALUATIONS=${TUNE_EVALS:-100} KBUILD_BUDGET_SECONDS=${TUNE_SECONDS:-50} \
    build "$tuned_project" "$WORK/disttuned"
  echo "stage 5: the tuned build took $(( $(date +%s) - t5 )) s"
  cp "$WORK/disttuned.log" "$OUT/build_tuned.log"
  (cd "$WORK" && "$PY" -m kbuild inspect "$WORK"/disttuned/*.whl --json > "$OUT/manifest_tuned.json" \
     && "$PY" -m kbuild inspect "$WORK"/disttuned/*.whl)
  # what the tuner decided and why (levels, trials, notes): the store's records of the manifest's entries
  (cd "$WORK" && "$PY" - "$OUT/manifest_tuned.json" > "$OUT/tune_reports.json" <<'PY'
import json, subprocess, sys
out = {}
for e in json.load(open(sys.argv[1]))["kernels"]:
    r = subprocess.run([sys.executable, "-m", "kbuild", "cache", "get", e["key"], "--json"], capture_output=True,
                       text=True)
    out[f"{e['kernel']}.{e['target']}"] = json.loads(r.stdout) if r.stdout.strip() else {"error": r.stderr[-800:]}
json.dump(out, sys.stdout, indent=1)
PY
  ) || true
  (cd "$WORK" && "$PY" "$ROOT/benchmarks/gpu_hooks_check.py" --dry-run "$OUT/manifest_tuned.json" \
     --target "$("$PY" -c 'import torch; print("sm_%d%d" % torch.cuda.get_device_capability(0))')" \
     > "$OUT/compare_plan.json") || true
  pipq install --no-deps --no-index --target "$WORK/demotuned" "$WORK"/disttuned/*.whl
  (cd "$WORK" && "$PY" "$ROOT/benchmarks/gpu_hooks_check.py" --compare "$WORK/demo" "$WORK/demotuned" \
     "$OUT/manifest_tuned.json" --ratio-tol "${RATIO_TOL:-0.03}" --out "$OUT/gpu_hooks_check_tuned.json") || status=1
fi

echo "== result: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
