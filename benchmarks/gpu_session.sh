#!/usr/bin/env bash
# The H200 evidence for issues 5-8, as three device calls of under 10 minutes each (one session's
# 30 device-minutes). Run from the repository root on the GPU machine, carrying .whl (the wheels of
# ../shared/tools/device-wheels: diskcache, gymnasium, stable-baselines3, sb3-contrib):
#
#   device run (carry [".whl"]):  bash benchmarks/gpu_session.sh bench   # #5: suite baselines + fault isolation
#   device run (carry [".whl"]):  bash benchmarks/gpu_session.sh tune    # #6: kbuild tune on suite kernels
#   device run (carry [".whl"]):  bash benchmarks/gpu_session.sh hooks   # #7/#8: tuned wheel, runtime, GPU tests
#
# Outputs go to $OUT (at most 8 files come back from a device call, so folders are tarred).
# `bench` also leaves .gpu-state/bench.json (git-ignored), which `tune` reads on the same warm machine
# to tune each kernel's autotuned configuration; failing that, benchmarks/results/h200/bench/bench.json.
# TUNE_KERNELS, TUNE_TOTAL_S and HOOKS_TUNE_S override the defaults below.
set -uo pipefail
cd "$(dirname "$0")/.."
step=${1:?usage: gpu_session.sh bench|tune|hooks}
OUT=${OUT:-/tmp/kbuild-gpu-out}
mkdir -p "$OUT" .gpu-state
T0=$(date +%s)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader || true
left() { echo $(( ${1} - ($(date +%s) - T0) )); }

case "$step" in
bench)
  python3 benchmarks/gpu_bench_run.py --no-pytest --out "$OUT" 2>&1 | tee "$OUT/bench_run.log"
  cp "$OUT/bench/bench.json" .gpu-state/bench.json 2>/dev/null || true
  ;;
tune)
  configs=.gpu-state/bench.json
  [ -f "$configs" ] || configs=benchmarks/results/h200/bench/bench.json
  args=()
  [ -f "$configs" ] && args+=(--configs-from "$configs")
  for k in ${TUNE_KERNELS:-matmul_leakyrelu_512x512x2048 flash_attn_d64 layernorm rmsnorm_swiglu}; do
    args+=(--only "$k")
  done
  total=${TUNE_TOTAL_S:-$(left 540)}
  echo "tuning ${args[*]} within $total s (configs from ${configs})"
  python3 -m kbuild tune --suite --target sm_90 --algo all --budget-evals 1000 --budget-seconds 120 \
    --total-seconds "$total" "${args[@]}" --out "$OUT/tune" --json > "$OUT/suite.json" 2> "$OUT/tune.log"
  echo "kbuild tune exit $?"
  tail -5 "$OUT/tune.log"
  tar czf "$OUT/tune.tar.gz" -C "$OUT" tune && rm -rf "$OUT/tune"
  python3 - "$OUT/suite.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    algos = " ".join(f"{a}={v['best_ratio']:.4f}/{v['evaluations']}ev/{v['seconds']:.0f}s" for a, v in r["algorithms"].items())
    print(f"{r['name']:<30} {r['region'].get('kind')}[{r['region'].get('start')},{r['region'].get('end')}) "
          f"movable={r['movable_instructions']} {algos}\n    -> {r['decision']['reason']}")
PY
  ;;
hooks)
  echo "== GPU tests"
  timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/measure/test_measure_gpu.py \
    tests/bench/test_bench_gpu.py tests/tune/test_tune_gpu.py tests/runtime/test_runtime_gpu.py 2>&1 \
    | tee "$OUT/pytest_gpu.txt" | tail -15
  echo "== issue 7: the example wheel, baseline and tune = auto, side by side"
  mkdir -p "$OUT/hooks"
  STAGES="1 5" TUNE_EVALS=1000 TUNE_SECONDS=${HOOKS_TUNE_S:-40} OUT="$OUT/hooks" \
    timeout 330 bash benchmarks/gpu_hooks_check.sh > "$OUT/hooks_console.log" 2>&1
  echo "gpu_hooks_check exit $?"; grep -E "^ *kbuild|state|speedup|== |PASS|FAIL" "$OUT/hooks/gpu_hooks_check.log" | tail -25
  tar czf "$OUT/hooks.tar.gz" -C "$OUT" hooks && rm -rf "$OUT/hooks"
  echo "== issue 8: kbuild.runtime with the tuner's results"
  timeout "$(left 570)" python3 benchmarks/gpu_runtime_substitution.py --out "$OUT" --evals 1000 \
    --seconds "${HOOKS_TUNE_S:-40}"
  echo "gpu_runtime_substitution exit $?"
  ;;
*) echo "unknown step $step"; exit 2;;
esac
echo "step $step took $(( $(date +%s) - T0 )) s"
