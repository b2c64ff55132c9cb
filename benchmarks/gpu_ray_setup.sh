#!/usr/bin/env bash
# Install Ray and kbuild's prewarm dependencies on the offline H200 from ./.whl-ray (made here by
# benchmarks/gpu_ray_pack.sh; about 24 MB), then check that Ray works. Run from the repository root on the device,
# carrying [".whl-ray"] (the whole call then carries about 48 MB: the tracked files plus .whl-ray):
#
#   bash benchmarks/gpu_ray_setup.sh && . /tmp/site/ray-env.sh && python3 benchmarks/gpu_prewarm_ray.py --out "$OUT/prewarm_ray.json"
#
# 1. the cp312 wheels of .whl-ray into $SITE (default /tmp/site) with pip --no-index --target;
# 2. the trimmed Ray tree (ray/ and its dist-info, as pip would lay out the wheel) unpacked into $SITE, and the
#    `ray` command its entry point names written to $SITE/bin/ray for this python3;
# 3. $SITE/ray-env.sh, to source: PYTHONPATH (the checkout, for kbuild, then $SITE), PATH ($SITE/bin first),
#    PYTHONUNBUFFERED, RAY_USAGE_STATS_ENABLED=0; and the links kbuild/{hooks,cache,templates} (the checkout
#    imports like the installed wheel, as benchmarks/gpu_session.sh makes them);
# 4. `import ray`; unless RAY_SETUP_CHECK=0, `ray start --head --block --num-gpus 1` with the prewarm's custom
#    resource (own port and temp dir), one task asking for the GPU (it prints what Ray gave it and what torch
#    sees), then SIGTERM to that `ray start`, which stops the processes it started. About 15 s.
# Prints the seconds each step took. Exit status non-zero when any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SITE:-/tmp/site}
PY=${PY:-$(command -v python3)}
tarball=$(ls .whl-ray/ray-*-trimmed.tar.xz)
mkdir -p "$SITE/bin"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl-ray/*.whl
echo "gpu_ray_setup: wheels installed into $SITE (${SECONDS} s)"
# Python's tarfile, not tar -J: the device image need not have xz. The "tar" filter keeps the executables' modes.
"$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$tarball" "$SITE"
cat > "$SITE/bin/ray" <<EOF
#!$PY
import sys
from ray.scripts.scripts import main
sys.exit(main())
EOF
chmod +x "$SITE/bin/ray"
echo "gpu_ray_setup: $(basename "$tarball") unpacked (${SECONDS} s)"
for d in hooks cache templates; do [ -e "kbuild/$d" ] || ln -s "../$d" "kbuild/$d"; done
cat > "$SITE/ray-env.sh" <<EOF
export PYTHONPATH="$PWD:$SITE\${PYTHONPATH:+:\$PYTHONPATH}"
export PATH="$SITE/bin:\$PATH"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
EOF
# shellcheck disable=SC1091
. "$SITE/ray-env.sh"
"$PY" -c 'import ray, ray.cluster_utils, ray.util.scheduling_strategies; print("gpu_ray_setup: ray", ray.__version__, "from", ray.__file__)'
[ "${RAY_SETUP_CHECK:-1}" = 0 ] && exit 0
# The check's head: its own port and temp dir, `--block` so that it stops its own processes when this script
# sends it SIGTERM (no `ray stop`, which would stop every Ray process of the machine).
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tmp=$(mktemp -d /tmp/ray-check.XXXXXX)
ray start --head --block --port "$port" --temp-dir "$tmp" --num-gpus 1 --resources '{"kbuild_sm_90": 1}' \
  --include-dashboard=false --disable-usage-stats >"$tmp/start.log" 2>&1 &
head_pid=$!
rc=0
RAY_CHECK_ADDRESS="127.0.0.1:$port" "$PY" - <<'PY' || rc=$?
import os
import time

import ray

t0 = time.monotonic()
while True:  # the head is starting in the background
    try:
        ray.init(address=os.environ["RAY_CHECK_ADDRESS"], logging_level="WARNING")
        break
    except Exception:
        if time.monotonic() - t0 > 90:
            raise
        time.sleep(0.5)
print(f"gpu_ray_setup: connected after {time.monotonic() - t0:.1f} s; cluster resources {ray.cluster_resources()}")


@ray.remote(num_gpus=1, resources={"kbuild_sm_90": 1})
def probe():
    try:
        import torch
        seen = f"{torch.cuda.device_count()} ({torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'})"
    except Exception as e:  # the check is about Ray; torch only says what the task sees
        seen = f"torch: {e!r}"
    return ray.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"), seen


ids, visible, seen = ray.get(probe.remote(), timeout=120)
print(f"gpu_ray_setup: GPU task: ray.get_gpu_ids()={ids} CUDA_VISIBLE_DEVICES={visible}; torch sees {seen}")
ray.shutdown()
PY
kill -TERM "$head_pid" 2>/dev/null || true
wait "$head_pid" 2>/dev/null || true
[ $rc = 0 ] || tail -20 "$tmp/start.log"
rm -rf "$tmp"
echo "gpu_ray_setup: ray start --head, a GPU task, stop: $([ $rc = 0 ] && echo ok || echo FAILED) (${SECONDS} s)"
exit $rc
