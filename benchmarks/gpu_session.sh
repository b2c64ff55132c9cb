#!/usr/bin/env bash
# The H200 evidence for issues 5-8, as two device calls of under 10 minutes each (one session has
# 30 device-minutes). Run from the repository root on the GPU machine, carrying .whl (the wheels of
# ../shared/tools/device-wheels: diskcache, gymnasium, stable-baselines3, sb3-contrib):
#
#   device run (carry [".whl"]):  bash benchmarks/gpu_session.sh bench tests          # about 9 minutes
#   device run (carry [".whl"]):  bash benchmarks/gpu_session.sh tune hooks runtime  # about 9 minutes
#
# Steps (any order, several per call; each gets a share of the call's CALL_S = 560 seconds):
#   bench    #5: `kbuild bench` on the suite, and fault isolation (benchmarks/gpu_bench_run.py)
#   faults   #5: fault isolation only (part of bench)
#   tests    every GPU-marked test (pytest -m gpu)
#   tune     #6: `kbuild tune --suite` on TUNE_KERNELS, all three algorithms, TUNE_EVALS evaluations and
#            TUNE_SECONDS seconds each at most, all within TUNE_TOTAL_S
#   hooks    #7: the example wheel built with tune = auto beside the baseline wheel (HOOKS_TUNE_S per kernel)
#   runtime  #8: the JIT example built with the tuner's results, substituted into @triton.jit calls
#   liger    #16: Liger-Kernel through its own API with kbx_liger's shipped cubins (benchmarks/gpu_liger.md)
#   ppo      #15: PPO (pretrained, carried in .ppo) vs scratch PPO, random and greedy on PPO_KERNELS (benchmarks/ppo_compare.py)
#
# Outputs go to $OUT (at most 8 files come back from a device call, so folders are tarred).
# `bench` also leaves .gpu-state/bench.json (git-ignored), which `tune` reads on the same warm machine
# to tune each kernel's autotuned configuration; failing that, benchmarks/results/h200/bench/bench.json.
# TUNE_KERNELS, TUNE_EVALS, TUNE_SECONDS, TUNE_TOTAL_S, HOOKS_TUNE_S and CALL_S override the defaults below.
set -uo pipefail
cd "$(dirname "$0")/.."
# The checkout imports like the installed wheel, where hooks/, cache/ and templates/ are kbuild.hooks,
# kbuild.cache and kbuild.templates (links, git-ignored).
for d in hooks cache templates; do [ -e "kbuild/$d" ] || ln -s "../$d" "kbuild/$d"; done
[ $# -gt 0 ] || { echo "usage: gpu_session.sh STEP... (bench tests tune hooks runtime liger ...)"; exit 2; }
CALL_S=${CALL_S:-560}
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

for step in "$@"; do
echo "== $step ($(left "$CALL_S") s left in this call)"
case "$step" in
bench)
  python3 benchmarks/gpu_bench_run.py --no-pytest --out "$OUT" 2>&1 | tee "$OUT/bench_run.log" | tail -30
  cp "$OUT/bench/bench.json" .gpu-state/bench.json 2>/dev/null || true
  ;;
faults)
  python3 benchmarks/gpu_bench_run.py --no-bench --no-pytest --out "$OUT" 2>&1 | tee "$OUT/faults_run.log" | tail -22
  ;;
tests)
  timeout "$(left "$CALL_S")" python3 -m pytest -m gpu -q -p no:cacheprovider tests/measure/test_measure_gpu.py \
    tests/bench/test_bench_gpu.py tests/tune/test_tune_gpu.py tests/runtime/test_runtime_gpu.py \
    tests/tune/test_level1_gpu.py 2>&1 \
    | tee "$OUT/pytest_gpu.txt" | tail -15
  ;;
tune)
  configs=.gpu-state/bench.json
  [ -f "$configs" ] || configs=benchmarks/results/h200/bench/bench.json
  args=()
  [ -f "$configs" ] && args+=(--configs-from "$configs")
  for k in ${TUNE_KERNELS:-matmul_leakyrelu_512x512x2048 flash_attn_d64 layernorm}; do args+=(--only "$k"); done
  total=${TUNE_TOTAL_S:-210}
  echo "tuning ${args[*]} within $total s"
  timeout "$(( $(left "$CALL_S") - 10 ))" python3 -m kbuild tune --suite --target sm_90 --algo all \
    --budget-evals "${TUNE_EVALS:-1000}" --budget-seconds "${TUNE_SECONDS:-120}" \
    --total-seconds "$total" "${args[@]}" --out "$OUT/tune" --json > "$OUT/suite.json" 2> "$OUT/tune.log"
  echo "kbuild tune exit $?"
  tail -3 "$OUT/tune.log"
  tar czf "$OUT/tune.tar.gz" -C "$OUT" tune && rm -rf "$OUT/tune"
  python3 - "$OUT/suite.json" <<'PY'
import json, sys
try:
    suite = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("no suite.json (the tune was cut short); the per-kernel reports are in tune.tar.gz")
for r in suite:
    algos = " ".join(f"{a}={v['best_ratio']:.4f}>{v.get('confirmed_ratio') or float('nan'):.4f}/{v['evaluations']}ev/"
                     f"{v['seconds']:.0f}s" for a, v in r["algorithms"].items())
    print(f"{r['name']:<30} {r['region'].get('kind')}[{r['region'].get('start')},{r['region'].get('end')}) "
          f"movable={r['movable_instructions']} {algos}\n    -> {r['decision']['reason']}")
PY
  ;;
hooks)
  mkdir -p "$OUT/hooks"
  STAGES=${HOOKS_STAGES:-"1 5"} TUNE_EVALS=${HOOKS_TUNE_EVALS:-1000} TUNE_SECONDS=${HOOKS_TUNE_S:-25} OUT="$OUT/hooks" \
    timeout "$(left "$CALL_S")" bash benchmarks/gpu_hooks_check.sh > "$OUT/hooks_console.log" 2>&1
  echo "gpu_hooks_check exit $?"
  grep -E "^ *kbuild:|measured|== " "$OUT/hooks/gpu_hooks_check.log" | tail -25
  tar czf "$OUT/hooks.tar.gz" -C "$OUT" hooks && rm -rf "$OUT/hooks"
  ;;
ppo)
  # Issue 15: PPO (pretrained on the cost model, leave-one-out) against scratch PPO, random and greedy on the GPU,
  # PPO_EVALS evaluations each. The checkpoints come pretrained from the CPU machine in .ppo/checkpoints (carry
  # ".ppo"; made by `python benchmarks/ppo_compare.py --backend model --only K... --pretrain-steps N
  # --cache-dir .ppo/cubins --out .ppo` with the same kernels and steps, reused when their metadata match).
  args=()
  for k in ${PPO_KERNELS:-rmsnorm_swiglu flash_attn_d64}; do args+=(--only "$k"); done
  timeout "$(( $(left "$CALL_S") - 5 ))" python3 benchmarks/ppo_compare.py --backend gpu "${args[@]}" \
    --budget-evals "${PPO_EVALS:-100}" --budget-seconds "${PPO_SECONDS:-40}" --pretrain-steps "${PPO_STEPS:-2000}" \
    --cache-dir .ppo/cubins --out .ppo > "$OUT/ppo_compare.log" 2>&1
  echo "ppo_compare exit $?"
  cp .ppo/ppo_compare.json .ppo/ppo_compare.md "$OUT/" 2>/dev/null
  tail -14 "$OUT/ppo_compare.log"
  ;;
runtime)
  timeout "$(left "$CALL_S")" python3 benchmarks/gpu_runtime_substitution.py --out "$OUT" --evals 1000 \
    --seconds "${HOOKS_TUNE_S:-25}"
  echo "gpu_runtime_substitution exit $?"
  ;;
fuzz)
  # Issue 15: every SASS edit kind mixed into random legal sequences, each run bit-exact against the
  # untouched kernel on the GPU.
  timeout "$(left "$CALL_S")" python3 benchmarks/gpu_sass_fuzz.py --cpu-workers 14 --timeout 30 \
    --kinds "${FUZZ_KINDS:-moves,far,yield,reuse,stall}" --sequences "${FUZZ_SEQ:-200}" --max-depth 64 \
    --out "$OUT/gpu_sass_fuzz_kinds.json" 2>&1 | tail -25
  echo "gpu_sass_fuzz exit ${PIPESTATUS[0]}"
  ;;
l1)
  # Issue 15: level 1, racing against the exhaustive sweep on each suite kernel (L1_KERNELS, comma-separated).
  only=()
  [ -n "${L1_KERNELS:-}" ] && only=(--only "$L1_KERNELS")
  timeout "$(left "$CALL_S")" python3 benchmarks/config_search.py --backend gpu --jobs 14 "${only[@]}" \
    --out "$OUT/config_search${L1_TAG:-}.json" > "$OUT/config_search${L1_TAG:-}.log" 2>&1
  echo "config_search exit $?"
  tail -25 "$OUT/config_search${L1_TAG:-}.log"
  ;;
tune2)
  # Issue 15: both levels on the suite (TUNE2_KERNELS), TUNE2_EVALS evaluations per kernel, within TUNE2_TOTAL_S.
  args=()
  for k in ${TUNE2_KERNELS:-}; do args+=(--only "$k"); done
  mkdir -p "$OUT/tune2${TUNE2_TAG:-}"
  timeout "$(( $(left "$CALL_S") - 10 ))" python3 -m kbuild tune --suite --target sm_90 --jobs 14 \
    --budget-evals "${TUNE2_EVALS:-1000}" --budget-seconds "${TUNE2_SECONDS:-600}" --kinds "${TUNE2_KINDS:-moves}" --top "${TUNE2_TOP:-2}" \
    --total-seconds "${TUNE2_TOTAL_S:-400}" "${args[@]}" --out "$OUT/tune2${TUNE2_TAG:-}" --json \
    > "$OUT/tune2${TUNE2_TAG:-}/suite.json" 2> "$OUT/tune2${TUNE2_TAG:-}/tune.log"
  echo "kbuild tune exit $?"
  tail -5 "$OUT/tune2${TUNE2_TAG:-}/tune.log"
  mkdir -p .gpu-state && cp "$OUT/tune2${TUNE2_TAG:-}/suite.json" ".gpu-state/tune2${TUNE2_TAG:-}.json" 2>/dev/null
  python3 - "$OUT/tune2${TUNE2_TAG:-}/suite.json" <<'PY'
import json, sys
try:
    suite = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit("no suite.json (the tune was cut short)")
f = lambda v: "-" if v is None else f"{v:.3f}"
for r in suite:
    g, l1 = r["gains"], r.get("level1") or {}
    print(f"{r['name']:<30} {l1.get('autotune_best_label','-'):<36} -> {r['config_label']:<36} l1={f(g['level1'])} "
          f"l2={f(g['level2'])} final={f(g['final'])} evals={r['evaluations']} {r['seconds']:.0f}s "
          f"{(r.get('final') or {}).get('reason', '')}")
PY
  tar czf "$OUT/tune2${TUNE2_TAG:-}.tar.gz" -C "$OUT" "tune2${TUNE2_TAG:-}" && rm -rf "$OUT/tune2${TUNE2_TAG:-}"
  ;;
peers)
  # Issue 15: kbuild bench with the peers, timing what ships (the configurations tune2 chose) when known.
  pins=()
  if compgen -G ".gpu-state/tune2*.json" >/dev/null; then
    python3 - .gpu-state/tune2*.json > .gpu-state/pins.json <<'PY' && pins+=(--configs-from .gpu-state/pins.json)
import json, sys
pins = {}
for f in sys.argv[1:]:
    pins.update({r["name"]: r["config"] for r in json.load(open(f))})
json.dump(pins, sys.stdout)
PY
  fi
  timeout "$(left "$CALL_S")" python3 -m kbuild bench --peers "${pins[@]}" --out "$OUT/peers" --json \
    > "$OUT/peers.json" 2> "$OUT/peers.log"
  echo "kbuild bench exit $?"
  tail -30 "$OUT/peers.log"
  tar czf "$OUT/peers.tar.gz" -C "$OUT" peers 2>/dev/null && rm -rf "$OUT/peers"
  ;;
liger)
  # Issue 16 item 5: examples/liger built through the backend (baselines), Liger's own API first-call
  # cold start (shipped vs Triton cold/warm cache), zero-JIT counts, bit-identity, steady state, and
  # Liger's own unit tests from its sdist with kbuild.runtime on. Carry .whl: liger_kernel-0.8.5 wheel
  # in .whl/ (../shared/tools/device-wheels liger-kernel==0.8.5); sdist and transformers>=5 wheels in
  # .whl/liger-tests/ (see benchmarks/gpu_liger.py). LIGER_REPEATS, LIGER_TESTS_S override.
  # A wheel prebuilt on the CPU machine (gpu_liger.py --dry-run --keep-wheel .whl/liger-prebuilt) saves the build.
  prebuilt=()
  for w in .whl/liger-prebuilt/kbx_liger-*.whl; do [ -f "$w" ] && prebuilt=(--wheel "$w"); done
  timeout "$(left "$CALL_S")" python3 benchmarks/gpu_liger.py --out "$OUT/gpu_liger.json" "${prebuilt[@]}" \
    --repeats "${LIGER_REPEATS:-1}" --tests-timeout "${LIGER_TESTS_S:-170}" 2>&1 | tee "$OUT/gpu_liger.log" | tail -40
  echo "gpu_liger exit ${PIPESTATUS[0]}"
  ;;
*) echo "unknown step $step"; exit 2;;
esac
done
echo "steps $* took $(( $(date +%s) - T0 )) s"
