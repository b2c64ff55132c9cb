#!/usr/bin/env bash
# First call on the GPU machine: what is there, does kbuild install offline, and do cubins compiled
# there match the ones compiled on the CPU machine byte for byte?
#   device run: bash benchmarks/gpu_probe.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/nvidia_smi.csv"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"
python3 -m pip show scikit-build-core 2>/dev/null | grep -i ^version
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/kb . > "$OUT/pip_install.log" 2>&1 \
  && echo "kbuild wheel built and installed offline" || { echo "offline install FAILED"; tail -5 "$OUT/pip_install.log"; }
PYTHONPATH=/tmp/kb python3 benchmarks/cross_machine_cubins.py > "$OUT/cross_machine_gpu.json"
python3 - "$OUT/cross_machine_gpu.json" benchmarks/results/cross_machine_cpu.json <<'PY'
import json, sys
gpu, cpu = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'kernel/target':28} {'key equal':10} {'cubin equal':11}")
for k in sorted(cpu["kernels"]):
    a, b = cpu["kernels"][k], gpu["kernels"].get(k, {})
    print(f"{k:28} {str(a['baseline_key'] == b.get('baseline_key')):10} {str(a['cubin_sha256'] == b.get('cubin_sha256')):11}")
print("cpu:", cpu["python"], cpu["triton"], cpu["ptxas"], "| gpu:", gpu["python"], gpu["triton"], gpu["ptxas"])
PY
