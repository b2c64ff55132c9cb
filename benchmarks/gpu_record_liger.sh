#!/usr/bin/env bash
# Issue 34 part 5 on the GPU machine: Liger-Kernel 0.8.5's own test files, taken as they are from its sdist
# (.whl/liger-tests/liger_kernel-0.8.5.tar.gz), run under `kbuild record --mode gpu` (Triton's own hooks, Triton
# compiling and autotuning as usual: KBUILD_RUNTIME=off), into one recording: every specialisation the tests launch,
# with the autotuner's measured choices on this card. The recording is what examples/liger's build declares from.
#
#   OUT=/tmp/out FILES="rms_norm dyt" PER_FILE_S=60 bash benchmarks/gpu_record_liger.sh
#
# Each file runs under `timeout -s INT` (pytest stops and reports; the recorder writes as it goes, so a file cut
# short keeps what it launched); pytest-xdist `-n $WORKERS` when it is importable. Writes $OUT/liger.recording.json,
# $OUT/record_<file>.log and $OUT/record_liger.json (per file: exit status, pytest's summary line, seconds).
# PYTEST_K="expr" records only the tests pytest's -k selects (a file's slow tail that a time limit cut before).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kbuild-record-liger}; mkdir -p "$OUT"
FILES=${FILES:-"rms_norm swiglu geglu layer_norm cross_entropy dyt"}
PER_FILE_S=${PER_FILE_S:-60}; WORKERS=${WORKERS:-8}; MODE=${MODE:-gpu}
work=$(mktemp -d); site=$work/tests-site
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$site" .whl/liger-tests/*.whl
tar -xzf .whl/liger-tests/liger_kernel-0.8.5.tar.gz -C "$work" --wildcards 'liger_kernel-0.8.5/test/*'
root=$work/liger_kernel-0.8.5
: > "$root/conftest.py"                 # puts the sdist root on sys.path (the tests import test.utils)
printf '[pytest]\n' > "$root/pytest.ini"  # not the sdist's options (pythonpath src/: Liger must come from its wheel)
export PYTHONPATH="$root:$site:${PYTHONPATH:-}" KBUILD_RUNTIME=off
xdist=(); python3 -c "import xdist" 2>/dev/null && [ "$WORKERS" -gt 0 ] && xdist=(-n "$WORKERS")
select=(); [ -n "${PYTEST_K:-}" ] && select=(-k "$PYTEST_K")
recording=$(realpath "$OUT")/liger.recording.json
echo "{" > "$OUT/record_liger.json"; first=1
for f in $FILES; do
  start=$(date +%s.%N)
  (cd "$root" && python3 -m kbuild record --mode "$MODE" --out "$recording" -- \
     timeout -s INT -k 20 "$PER_FILE_S" python3 -m pytest -q -p no:cacheprovider "${xdist[@]}" "${select[@]}" \
     "test/transformers/test_$f.py") > "$OUT/record_$f.log" 2>&1
  rc=$?; secs=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  summary=$(grep -E "(passed|failed|error)" "$OUT/record_$f.log" | tail -1 | tr -d '"=')
  [ $first = 1 ] || echo "," >> "$OUT/record_liger.json"; first=0
  printf ' "%s": {"rc": %d, "seconds": %s, "summary": "%s"}' "$f" "$rc" "$secs" "$summary" >> "$OUT/record_liger.json"
  echo "$f: rc=$rc ${secs}s $summary"
done
echo "}" >> "$OUT/record_liger.json"
python3 - "$recording" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for k in doc["kernels"]:
    tuned = sum(1 for s in k["specializations"] if s.get("autotune_config"))
    print(f'{k["function"]:70s} specs {len(k["specializations"]):3d}  autotuned-choice {tuned:3d}  tunings {len(k.get("tunings") or [])}')
print("kernels", len(doc["kernels"]), "specializations", sum(len(k["specializations"]) for k in doc["kernels"]))
PY
rm -rf "$work"
