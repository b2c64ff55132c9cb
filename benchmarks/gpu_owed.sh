#!/usr/bin/env bash
# gpu_session.md "Owed now", as calls that fit the 64 MiB a call carries and its 600 s. One part per call:
#
#   bash benchmarks/gpu_owed.sh derived         # carry .whl-c: the suite with derived spaces, to its end (~9.5 min)
#   bash benchmarks/gpu_owed.sh first           # carry .whl-c: first calls, each kernel's and each op's (~8 min)
#   bash benchmarks/gpu_owed.sh steady          # carry .whl-c: steady state on against off, then the GPU tests (~6 min)
#   bash benchmarks/gpu_owed.sh strict          # carry .whl-h: Liger's tests under strict (~9 min)
#   bash benchmarks/gpu_owed.sh tests           # carry .whl-c: the GPU tests of issue 35 (~2 min)
#   bash benchmarks/gpu_owed.sh l3              # carry .whl-c: Liger at Llama-3-8B shapes, tuned into a wheel (~9.5 min)
#   bash benchmarks/gpu_owed.sh l3-steady       # carry .whl-c with l3/ (the wheel l3 built): shipped vs Liger's own
#   bash benchmarks/gpu_owed.sh first-derived   # carry .whl-c: what the seventh session ran first (results/h100/s7)
#
# .whl-c (14 MB) is .whl-t (optuna & co., liger-kernel 0.8.5, diskcache) plus liger-prebuilt/ (the kbx_liger wheel
# built on the CPU machine for sm_90): `mkdir -p .whl-c/liger-prebuilt; cp .whl-t/*.whl .whl-c/; cp
# .whl-g/liger-prebuilt/* .whl-c/liger-prebuilt/`. .whl-h (18 MB) is .whl-g less adopt/ and liger-prebuilt/:
# `mkdir -p .whl-h/liger-tests; cp .whl-g/*.whl .whl-h/; cp .whl-g/liger-tests/* .whl-h/liger-tests/`. Timed parts
# run alone on the machine; each part stops itself before the call's limit (LIMIT_S, default 570) and leaves what it
# measured under $OUT, many files tarred (a call returns a limited number of files).
set -u
part=${1:-}; LIMIT_S=${LIMIT_S:-570}; t0=$(date +%s)
case "$part" in first-derived|tests|derived|first|steady|l3|l3-steady) wheels=${WHEELS:-.whl-c} ;; strict) wheels=${WHEELS:-.whl-h} ;;
  *) echo "usage: gpu_owed.sh derived|first|steady|strict|tests|first-derived|l3|l3-steady" >&2; exit 2 ;; esac
[ -n "${OUT:-}" ] && [ -d "$wheels" ] || { echo "for the GPU machine's run (OUT set, $wheels carried)" >&2; exit 2; }
left() { echo $(( LIMIT_S - ($(date +%s) - t0) )); }
# .whl is not carried, so on the device it is absent or this script's own link; a directory is someone's wheels
[ -d .whl ] && [ ! -L .whl ] && { echo ".whl is a directory here: run this on the GPU machine's copy of the tree" >&2; exit 2; }
rm -f .whl; ln -s "$wheels" .whl   # the device's copy of the tree: the scripts read .whl/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
for d in hooks cache templates; do [ -e kbuild/$d ] || ln -s ../$d kbuild/$d; done
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $OUT/card.txt
python3 -m compileall -q kbuild /tmp/site
W=.whl/liger-prebuilt/kbx_liger-0.1.0-py3-none-any.whl
suite() {  # the suite with no space written, within $1 seconds (derivations inside), tarred
  timeout -k 10 $(( $1 + 30 )) python3 -m kbuild tune --suite --derive-space --total-seconds "$1" --json \
    --out $OUT/derived > $OUT/derived.log 2>&1
  echo "derived rc=$? $(( $(date +%s)-t0 ))s"; tail -c 1500 $OUT/derived.log
  [ -f $OUT/derived/suite.json ] && python3 -c "import json; s = json.load(open('$OUT/derived/suite.json')); \
print('suite: %d of %d kernels, geomean %s, max %s' % (s['kernels'], s['planned'], s['geomean_speedup'], s['max_speedup']))"
  (cd $OUT && tar czf derived.tgz derived && rm -rf derived)
}
case "$part" in
derived)
  # item 1: every suite kernel, its space derived (register caps at its occupancy steps) inside its share
  suite $(( $(left) - 40 )) ;;
first)
  # item 2: each kernel's own first launch and each op's first call, shipped against Triton (fresh processes;
  # REPEATS per mode, the ops in this order until the share is spent: first.json is written after each op)
  timeout -k 5 $(( $(left) - 10 )) python3 benchmarks/gpu_liger.py --wheel $W --out $OUT/first.json --skip tests \
    --skip steady --repeats ${REPEATS:-2} --first-call-s $(( $(left) - 60 )) --only rms_norm/fp16 --only dyt/bf16 \
    --only swiglu/bf16 --only cross_entropy/bf16 --only layer_norm/bf16 --only geglu/fp16 > $OUT/first.log 2>&1
  echo "first rc=$? $(( $(date +%s)-t0 ))s"; tail -12 $OUT/first.log ;;
steady)
  # item 3: steady state, runtime on against off, side by side: small launches, then Liger's kernels ...
  timeout -k 5 240 python3 benchmarks/gpu_runtime_steady.py --rounds 3 --out $OUT/steady.json > $OUT/steady.log 2>&1
  echo "steady rc=$? $(( $(date +%s)-t0 ))s"; tail -12 $OUT/steady.log
  timeout -k 5 150 python3 benchmarks/gpu_liger.py --wheel $W --out $OUT/liger_steady.json --skip tests \
    --skip first-call > $OUT/liger_steady.log 2>&1
  echo "liger steady rc=$? $(( $(date +%s)-t0 ))s"; tail -16 $OUT/liger_steady.log
  # ... then the GPU tests (issue 35's, all passing in the seventh session; again after the changes since)
  timeout -k 10 $(( $(left) - 5 )) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --durations=0 \
    tests/tune/test_output_check.py tests/bench/test_recorded_gpu.py tests/tune/test_derived_space_gpu.py \
    > $OUT/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(( $(date +%s)-t0 ))s"; tail -8 $OUT/gpu_tests.log ;;
first-derived)
  # the seventh session's first call: where a shipped first call's time goes (cProfile, one process per mode) ...
  mkdir -p $OUT/prof
  KBX_PROFILE_DIR=$OUT/prof timeout -k 5 60 python3 benchmarks/gpu_liger.py --wheel $W --out $OUT/prof.json \
    --skip tests --skip steady --repeats 1 --only rms_norm/fp16 > $OUT/prof.log 2>&1
  echo "prof rc=$? $(( $(date +%s)-t0 ))s"; tail -12 $OUT/prof.log
  (cd $OUT && tar czf prof.tgz prof && rm -rf prof)
  # ... the other ops' first calls (first2.json is written after each op) ...
  timeout -k 5 150 python3 benchmarks/gpu_liger.py --wheel $W --out $OUT/first2.json --skip tests --skip steady \
    --repeats 2 --first-call-s 120 --only dyt/bf16 --only swiglu/bf16 --only cross_entropy/bf16 \
    --only layer_norm/bf16 --only geglu/fp16 > $OUT/first2.log 2>&1
  echo "first2 rc=$? $(( $(date +%s)-t0 ))s"; tail -20 $OUT/first2.log
  # ... and the suite with no space written (what the time left allows)
  suite $(( $(left) - 40 )) ;;
strict)
  # item 3: test_swiglu.py's Mixtral tail (the (123, 431) experts the earlier recordings' limits cut) recorded,
  # then every Liger test file under strict from a wheel built here, the multi-GPU tests deselected by name
  mkdir -p $OUT/strict
  OUT=$OUT/strict REC=examples/liger/recordings/liger-tests.h100.json RERECORD=swiglu RERECORD_S=${RERECORD_S:-170} \
    PYTEST_K=${PYTEST_K:-"mixtralexperts"} RERECORD_WORKERS=8 WORKERS=8 PER_FILE_S=${PER_FILE_S:-45} \
    DESELECT=${DESELECT:-"test/transformers/test_rms_norm.py::test_dtensor_rms_norm"} \
    FILES="swiglu rms_norm dyt geglu layer_norm cross_entropy" timeout -k 10 $(( $(left) - 10 )) \
    bash benchmarks/gpu_liger_strict.sh > $OUT/strict/strict_run.log 2>&1
  echo "strict rc=$? $(( $(date +%s)-t0 ))s"; tail -24 $OUT/strict/strict_run.log
  (cd $OUT && tar czf strict.tgz strict && rm -rf strict) ;;
l3)
  # issue 35's Liger target: the Llama-3-8B workload recorded on this GPU (~1 min), then examples/liger built from that
  # recording with tune = "auto" (7 entries: 6 kernels, rms_norm forward twice; BUDGET_S each, derivations and pruning on
  # this machine's CPUs), each kernel's report under $OUT as it finishes (tarred, also when the limit cuts the build)
  mkdir -p $OUT/l3reports
  OUT=$OUT BUDGET_S=${BUDGET_S:-40} GPU_RECORD=${GPU_RECORD:-1} REPORTS_DIR=$OUT/l3reports \
    timeout -k 10 $(( $(left) - 15 )) bash benchmarks/gpu_liger_llama3_tune.sh build > $OUT/l3.log 2>&1
  echo "l3 build rc=$? $(( $(date +%s)-t0 ))s"; tail -40 $OUT/l3.log
  [ -f $OUT/l3reports.tgz ] || (cd $OUT && tar czf l3reports.tgz l3reports)
  rm -rf $OUT/l3reports ;;
l3-steady)
  # the wheel l3 built (carried as .whl-c/l3/): Liger's own Functions at those shapes, shipped against Triton
  # compiling Liger's configuration, interleaved; then kbuild bench --recording with the torch peers
  OUT=$OUT WHEEL=${L3_WHEEL:-$(ls .whl/l3/kbx_liger-*.whl | head -1)} STEADY_S=$(( $(left) - 220 )) \
    timeout -k 10 $(( $(left) - 10 )) bash benchmarks/gpu_liger_llama3_tune.sh steady > $OUT/l3_steady.log 2>&1
  echo "l3 steady rc=$? $(( $(date +%s)-t0 ))s"; tail -40 $OUT/l3_steady.log
  [ -d $OUT/l3bench ] && (cd $OUT && tar czf l3bench.tgz l3bench && rm -rf l3bench) ;;
tests)
  # the GPU tests the sixth session's cut left, element_mul's level 1 last with its own limit
  timeout -k 10 $(( $(left) - 160 )) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --durations=0 -s \
    tests/tune/test_output_check.py tests/bench/test_recorded_gpu.py -k "sass or peers or output_check" \
    > $OUT/gpu_a.log 2>&1
  echo "gpu_a rc=$? $(( $(date +%s)-t0 ))s"; tail -30 $OUT/gpu_a.log
  timeout -k 10 $(( $(left) - 5 )) python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider --durations=0 -s \
    tests/bench/test_recorded_gpu.py -k "level1 and element_mul" > $OUT/gpu_b.log 2>&1
  echo "gpu_b rc=$? $(( $(date +%s)-t0 ))s"; tail -15 $OUT/gpu_b.log ;;
esac
ls -la $OUT
