#!/usr/bin/env bash
# Issue 35 on the GPU machine: Liger-Kernel's kernels tuned from a recording at Llama-3-8B shapes, what ships against
# Liger's own choice, side by side (gpu_session.md item 4b). Carry .whl-t (the tuner's wheels) as .whl.
#
#   OUT=$OUT BUDGET_S=75 [GPU_RECORD=1] bash benchmarks/gpu_liger_llama3_tune.sh build  # tuned wheel, reports, log
#   OUT=$OUT WHEEL=path bash benchmarks/gpu_liger_llama3_tune.sh steady     # shipped vs Liger's own, and the peers
#
# build: examples/liger copied, built through kbuild's backend for sm_90 with tune = "auto" from
#   recordings/llama3-8b.cpu.json alone (a bench spec from each recorded call, the derived space pruned on the CPU,
#   both levels, the peers timed beside what ships), KBUILD_REPORTS writing each kernel's report. Keeps the wheel,
#   the reports (tar) and the wheel's index entries that serve Liger's own calls (serves_call).
# steady: gpu_liger.py's steady state at the same shapes (KBX_LIGER_SHAPES=llama3): each op through Liger's own
#   autograd Function, the shipped (tuned) kernels against Triton compiling Liger's own configuration, interleaved,
#   outputs compared; then kbuild bench --recording: Liger's recorded calls with their torch peers in the same rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kbuild-l3}; mkdir -p "$OUT"; out=$(realpath "$OUT")
what=${1:-build}
if [ "$what" = build ]; then
  work=$(mktemp -d); cp -r examples/liger "$work/proj"
  reports=${REPORTS_DIR:-$work/reports}  # REPORTS_DIR under $OUT: a build cut by its limit keeps what finished
  rec=recordings/llama3-8b.cpu.json
  if [ "${GPU_RECORD:-0}" = 1 ]; then  # the same workload recorded on this GPU: rms_norm's backward, whose
    # rows_per_program and dW rows follow the SM count, is then reproducible here (a CPU recording has 1 SM)
    (cd "$work/proj" && python3 -m kbuild record --mode gpu --out recordings/llama3-8b.gpu.json -- \
       python3 workload.py --llama3 --cuda > "$out/l3_record.log" 2>&1) && rec=recordings/llama3-8b.gpu.json
    echo "recording: $rec"; cp "$work/proj/$rec" "$out/" 2>/dev/null
  fi
  start=$(date +%s)
  (cd "$work/proj" && KBUILD_TUNE=auto KBUILD_RECORDINGS=$rec \
     KBUILD_BUDGET_SECONDS=${BUDGET_S:-75} KBUILD_BUDGET_EVALUATIONS=${BUDGET_EVALS:-400} \
     KBUILD_REPORTS="$reports" KBUILD_STORE="$work/store" \
     python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -C kbuild.targets=sm_90 -w "$out/dist" . \
     > "$out/l3_build.log" 2>&1)
  rc=$?; echo "build rc=$rc $(( $(date +%s) - start ))s"
  grep -E "^kbuild|tuned|untuned|speedup|shipped" "$out/l3_build.log" | tail -25
  wheel=$(ls "$out"/dist/kbx_liger-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    python3 - "$wheel" > "$out/l3_index.json" <<'PY'
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
idx = json.loads(z.read(next(n for n in z.namelist() if n.endswith("_kbuild/index.json"))))
entries = idx["entries"]
keep = {k: {f: e.get(f) for f in ("function", "config", "serves_call", "tuned", "speedup", "gains", "cubin_sha256")}
        for k, e in entries.items() if e.get("serves_call") or e.get("tuned")}
print(json.dumps({"entries": len(entries), "tuned_or_serving": keep}, indent=1, sort_keys=True))
PY
    python3 -c "import json; d=json.load(open('$out/l3_index.json')); print(d['entries'], 'entries;', len(d['tuned_or_serving']), 'tuned or serving a call')"
  fi
  [ -d "$reports" ] && tar czf "$out/l3reports.tgz" -C "$(dirname "$reports")" "$(basename "$reports")" && ls "$reports"
  rm -rf "$work"
  exit $rc
fi
if [ "$what" = steady ]; then
  KBX_LIGER_SHAPES=llama3 timeout ${STEADY_S:-300} python3 benchmarks/gpu_liger.py --wheel "$WHEEL" --skip tests \
    --skip first-call --tuned --rounds ${ROUNDS:-3} --reps ${REPS:-10} --out "$out/l3_steady.json" 2>&1 | tail -20
  timeout ${BENCH_S:-200} python3 -m kbuild bench --recording examples/liger/recordings/llama3-8b.cpu.json \
    --out "$out/l3bench" > "$out/l3bench.log" 2>&1; echo "bench rc=$?"; tail -25 "$out/l3bench.log"
  exit 0
fi
echo "usage: $0 build|steady" >&2; exit 2
