#!/usr/bin/env bash
# Pack Ray (and what kbuild's prewarm needs besides) for the offline H200 into ./.whl-ray (git-ignored), small
# enough for the device tool's 64 MiB carry (the checkout's tracked files are about 24 MB of it; the ray 2.60.0
# cp312 manylinux wheel alone is 79.3 MB). Run on a machine with network, from anywhere in the checkout:
#
#   bash benchmarks/gpu_ray_pack.sh      # 23.8 MB in .whl-ray (the Ray tarball 16.3 MB); about 4 minutes on 2 cores
#
# What it makes:
#   .whl-ray/ray-2.60.0-cp312-trimmed.tar.xz   the wheel's ray/ and ray-2.60.0.dist-info/ as pip lays them out,
#       minus what `ray start --head`, ray.init(address=...), tasks and actors (num_gpus, custom resources),
#       runtime_env working_dir/py_modules and ray.cluster_utils do not use: the Java jar, the dashboard's web
#       front end, the libraries (data, serve, train, tune, rllib, air, llm, workflow), the cloud providers of
#       the autoscaler (aws, gcp, azure, aliyun, vsphere, spark, kuberay), tests, Cython sources and headers;
#       ELF files (_raylet.so, gcs_server, raylet, the vendored C extensions) stripped of their symbol tables
#       (strip --strip-unneeded: the dynamic symbols stay). RECORD is rewritten for the files that remain and
#       entry_points.txt keeps only the `ray` command.
#   .whl-ray/*.whl   the cp312 / pure-Python wheels the device image lacks: Ray's jsonschema stack and kbuild's
#       tune extra (gymnasium, stable-baselines3, sb3-contrib, optuna, ...), diskcache.
#
# benchmarks/gpu_ray_setup.sh installs both on the device. Versions: RAY_VERSION (default 2.60.0).
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
RAY_VERSION=${RAY_VERSION:-2.60.0}
PY=${PYTHON:-python3}
dest=.whl-ray
work=$(mktemp -d /tmp/kbuild-ray-pack.XXXXXX)
trap 'rm -rf "$work"' EXIT
rm -rf "$dest"
mkdir -p "$dest"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
dl() { "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         --abi cp312 --abi abi3 --abi none --platform any "${platforms[@]}" "$@"; }

dl -d "$work" "ray==$RAY_VERSION"
tree="$work/tree"
mkdir -p "$tree"
(cd "$tree" && unzip -q "$work"/ray-"$RAY_VERSION"-*.whl)
r="$tree/ray"
rm -rf "$r"/jars "$r"/dashboard/client "$r"/data "$r"/serve "$r"/train "$r"/tune "$r"/rllib "$r"/air "$r"/llm \
  "$r"/workflow "$r"/includes
for p in aws gcp azure aliyun vsphere spark; do rm -rf "${r:?}/autoscaler/$p"; done
for p in aws gcp _azure aliyun vsphere spark kuberay; do rm -rf "${r:?}/autoscaler/_private/$p"; done
find "$r" -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +
find "$r" -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.h' -o -name '*.js.map' \) -delete
# Strip every ELF file (shared objects and the gcs_server/raylet executables).
while IFS= read -r -d '' f; do
  if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ]; then strip --strip-unneeded "$f"; fi
done < <(find "$r" -type f -print0)
"$PY" - "$tree" "$RAY_VERSION" <<'PY'
import base64, hashlib, os, sys
tree, version = sys.argv[1], sys.argv[2]
info = os.path.join(tree, f"ray-{version}.dist-info")
with open(os.path.join(info, "entry_points.txt"), "w") as f:
    f.write("[console_scripts]\nray = ray.scripts.scripts:main\n")
rows = []
for base, _, files in os.walk(tree):
    for name in sorted(files):
        path = os.path.join(base, name)
        rel = os.path.relpath(path, tree)
        if rel == f"ray-{version}.dist-info/RECORD":
            continue
        data = open(path, "rb").read()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{len(data)}")
rows.append(f"ray-{version}.dist-info/RECORD,,")
with open(os.path.join(info, "RECORD"), "w") as f:
    f.write("\n".join(sorted(rows)) + "\n")
PY
tar -C "$tree" -cf - ray "ray-$RAY_VERSION.dist-info" | xz -T0 -9e > "$dest/ray-$RAY_VERSION-cp312-trimmed.tar.xz"

# Ray's dependencies the device image lacks (it has click, filelock, msgpack, packaging, protobuf, pyyaml, requests,
# attrs, aiohttp, grpcio, psutil: KINDS.md's list) and kbuild's tune extra minus torch/numpy (there already).
# The versions the CPU check of this packing ran with (benchmarks/gpu_ray_setup.sh, then gpu_prewarm_ray.py --dry-run).
dl -d "$dest" jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
  gymnasium==1.4.0 farama-notifications==0.0.6 stable-baselines3==2.9.2 sb3-contrib==2.9.2 diskcache==5.6.3 \
  optuna==5.1.0 alembic==1.20.1 sqlalchemy==2.1.9 colorlog==6.12.0 mako==1.4.3 greenlet==3.5.6
ls -l "$dest"
du -sb "$dest"
