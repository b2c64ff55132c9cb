#!/usr/bin/env bash
# Issue 34's adoption target in one GPU call (about 9 min): each package's own tests recorded on this GPU, the
# adoption wheel built here from that recording (no hand-written declaration), and the same tests run again from
# the wheel, so that no step waits for another session.
#
#   carry .whl-g (or a folder with .whl-adopt's wheels under adopt/), then: bash benchmarks/gpu_adopt_chain.sh
#
# 1. `adopt_package.py record PKG --mode gpu` for conch and fla side by side, each cut at REC_S seconds (the tests
#    it finished are in the report's tests.ids);
# 2. the wheel of benchmarks/adopt/PKG built through kbuild's backend from that recording (sm_90, fla with the
#    autotune cache its run left), the build's lines kept;
# 3. `adopt_package.py verify PKG --same-tests REPORT` with KBUILD_RUNTIME=on (the coverage report: every launched
#    specialisation and autotuning key answered or not, with the reason), then KBUILD_RUNTIME=strict (a test fails
#    at the first call that would compile or autotune).
# Returns card.txt and chain.tgz (reports, recordings, coverage, logs). Target: >= 95% answered per package.
set -u
[ -n "${OUT:-}" ] || { echo "for the GPU machine's run (OUT set)" >&2; exit 2; }
WHEELS=${WHEELS:-.whl-g/adopt}; REC_S=${REC_S:-200}; VERIFY_S=${VERIFY_S:-90}; JOBS=${JOBS:-4}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  "$WHEELS"/*.whl || exit 3
for d in hooks cache templates; do [ -e kbuild/$d ] || ln -s ../$d kbuild/$d; done
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/card.txt"
python3 -m compileall -q kbuild /tmp/site
res=$OUT/chain; mkdir -p "$res"; t0=$(date +%s)
stamp() { echo "$1 rc=$2 $(( $(date +%s) - t0 ))s"; }
# 1. record, both packages side by side
for pkg in conch fla; do
  ( timeout -k 10 $(( REC_S + 80 )) python3 benchmarks/adopt_package.py record $pkg --mode gpu --wheels "$WHEELS" \
      --jobs $JOBS --timeout $REC_S --out-dir "$res" > "$res/${pkg}_record.log" 2>&1; stamp "record $pkg" $? ) &
done; wait
# 2. build each adoption wheel from its recording, here
for pkg in conch fla; do
  caches=""; [ -d "$res/${pkg}_gpu.triton-autotune" ] && caches=$res/${pkg}_gpu.triton-autotune
  ( PYTHONPATH=/tmp/kbx-adopt/$pkg/site:$PYTHONPATH KBUILD_RECORDINGS=$res/${pkg}_gpu.recording.json \
      KBUILD_AUTOTUNE_CACHES=$caches KBUILD_TARGETS=sm_90 KBUILD_STORE=/tmp/chain-store-$pkg \
      timeout -k 10 150 python3 -m pip wheel -v --no-deps --no-build-isolation -w /tmp/chain-dist \
      benchmarks/adopt/$pkg > "$res/${pkg}_build.log" 2>&1; stamp "build $pkg" $? ) &
done; wait
# 3. the same tests from the wheel: on (coverage), then strict
for mode in on strict; do
  for pkg in conch fla; do
    wheel=$(ls /tmp/chain-dist/kbx_adopt_${pkg}-*.whl 2>/dev/null | head -1)
    [ -n "$wheel" ] || { echo "no $pkg wheel"; continue; }
    ( timeout -k 10 $(( VERIFY_S + 70 )) python3 benchmarks/adopt_package.py verify $pkg --wheel "$wheel" \
        --wheels "$WHEELS" --runtime $mode --same-tests "$res/${pkg}_gpu.json" --jobs $JOBS --timeout $VERIFY_S \
        --out-dir "$res" > "$res/${pkg}_verify-$mode.log" 2>&1; stamp "verify $pkg $mode" $? ) &
  done; wait
done
tail -n 3 "$res"/*_record.log "$res"/*_verify-*.log
cd "$OUT" && tar czf chain.tgz chain && rm -rf chain && ls -la "$OUT"
