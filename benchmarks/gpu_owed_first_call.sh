#!/usr/bin/env bash
# gpu_session.md "Owed now", items 1-3 in one call (about 9 min): carry .whl-g (the recipe is in gpu_session.md:
# .whl-s less the device image's own tokenizers and safetensors, plus .whl-adopt's fla-core, conch and diskcache under
# .whl-g/adopt), then `bash benchmarks/gpu_owed_first_call.sh`. Item 3 (first calls, timed) runs alone first; items 1
# and 2 (functional: recordings and strict runs) then run side by side. Returns card.txt, first.json, first.log,
# adopt.tgz, strict.tgz.
set -u
[ -n "${OUT:-}" ] && [ -d .whl-g ] || { echo "for the GPU machine's run (OUT set, .whl-g carried)" >&2; exit 2; }
# .whl is not carried, so on the device it is absent or this script's own link; a directory is someone's wheels
[ -d .whl ] && [ ! -L .whl ] && { echo ".whl is a directory here: run this on the GPU machine's copy of the tree" >&2; exit 2; }
rm -f .whl; ln -s .whl-g .whl   # the device's copy of the tree: the scripts below read .whl/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
for d in hooks cache templates; do [ -e kbuild/$d ] || ln -s ../$d kbuild/$d; done
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee $OUT/card.txt
python3 -m compileall -q kbuild /tmp/site
t0=$(date +%s)
# item 3: first calls, alone on the machine
timeout -k 10 170 python3 benchmarks/gpu_liger.py --wheel .whl/liger-prebuilt/kbx_liger-0.1.0-py3-none-any.whl \
  --out $OUT/first.json --skip tests --skip steady --repeats 2 --first-call-s 110 \
  --only rms_norm/fp16 --only swiglu/bf16 --only cross_entropy/bf16 --only dyt/bf16 --only geglu/fp16 \
  --only layer_norm/bf16 > $OUT/first.log 2>&1; echo "first rc=$? $(( $(date +%s)-t0 ))s"; tail -25 $OUT/first.log
# items 1 and 2 side by side
mkdir -p $OUT/adopt $OUT/strict
left=$(( 555 - ($(date +%s)-t0) ))   # seconds this call has left for items 1 and 2
( timeout -k 10 $left python3 benchmarks/adopt_package.py record conch --mode gpu --wheels .whl-g/adopt --jobs 4 \
    --timeout $(( left - 90 < 150 ? left - 90 : 150 )) --out-dir $OUT/adopt > $OUT/adopt/conch_record.log 2>&1
  echo "conch rc=$? $(( $(date +%s)-t0 ))s" ) &
( timeout -k 10 $left python3 benchmarks/adopt_package.py record fla --mode gpu --wheels .whl-g/adopt --jobs 5 \
    --timeout $(( left - 90 )) --out-dir $OUT/adopt > $OUT/adopt/fla_record.log 2>&1
  echo "fla rc=$? $(( $(date +%s)-t0 ))s" ) &
( OUT=$OUT/strict REC=examples/liger/recordings/liger-tests.h100.json RERECORD=swiglu RERECORD_S=130 \
    RERECORD_WORKERS=5 WORKERS=5 PER_FILE_S=50 FILES="swiglu dyt" timeout -k 10 $left bash benchmarks/gpu_liger_strict.sh \
    > $OUT/strict/strict_run.log 2>&1; echo "strict rc=$? $(( $(date +%s)-t0 ))s"; tail -20 $OUT/strict/strict_run.log ) &
wait
tail -5 $OUT/adopt/*.log
cd $OUT && tar czf adopt.tgz adopt && tar czf strict.tgz strict && rm -rf adopt strict; ls -la $OUT
