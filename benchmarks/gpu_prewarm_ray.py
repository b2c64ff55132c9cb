"""Ray's overhead on a prewarm (issue 18): the same prewarm through ``kbuild prewarm --ray`` and single-process.

Run on the H200 from the repository root, in one call (about 3 minutes with the defaults)::

    python benchmarks/gpu_prewarm_ray.py --out "$OUT/prewarm_ray.json"

Both modes prewarm ``examples/cmake-extension`` (``--kernel`` picks; default softmax and layernorm, the two
kernels without a level-1 space, so that the budget bounds the time) for ``sm_90`` on the same budget
(``--seconds`` per kernel, default 20, and 200 evaluations), each from an empty shared tier and an empty Triton
cache, into a local HTTP tier: a small WebDAV server started here (GET/PUT/HEAD/DELETE and MOVE, as leases
need; this script's :class:`DavHandler`), so no nginx is needed on the GPU host.

1. **single**: :func:`kbuild.build.prewarm.prewarm` in this process (compile, tune on the GPU, store).
2. **ray**: ``ray start --head --num-gpus 1 --resources '{"kbuild_sm_90": 1}'``, then
   :func:`kbuild.prewarm.ray_engine.prewarm_ray` (compile task, then the tune on a tune worker holding the GPU, under a lease, store),
   then ``ray stop``. The Ray cluster's start is timed apart (``ray_start_s``) and not counted as overhead: a
   fleet keeps its cluster running.

By default the ray mode ships the project and kbuild through Ray's ``runtime_env``, as ``kbuild prewarm --ray``
does (``--no-ship``: not; ``first_task_start_s`` shows what the job's start cost either way).

**A kernel with a configuration space** (``--kernel matmul_leaky_relu``: the example's 96-point space): level 1's
candidate compiles run, in the single mode, in the local process pool (one process per core but one, 15 on the
H200 host), and in the ray mode as compile shards, Ray CPU tasks of at most 4 configurations
(:mod:`kbuild.prewarm.shards`) on the head's CPUs (``ray start`` gives it every core; the tune worker holds no CPU), while the racing stays on the one GPU's
tune worker. The ray mode's JSON then holds
``shards``: per entry the shards, how many finished, failed or were retried, their compile seconds and nodes.
The level-1 screening is bounded by the seconds (45% of ``--seconds``), so both modes take about the budget;
what the shards change is how many configurations that time screens (``level1_tried`` per entry, both modes).

``--dry-run`` (CPU, no GPU): both modes tune with the cost model
(:func:`kbuild.prewarm.tasks.model_tuner`; the single mode with a GPU faked for the pipeline's check), the
cluster started with ``ray.cluster_utils.Cluster`` (its own processes, stopped by their ids) instead of
``ray start``/``ray stop --force``, which would stop every Ray process of the machine. The ray mode keeps the GPU
run's shape: ``backend="gpu"`` with the model as its tuner, and the head declares one (stand-in) GPU, so its tune
work asks for ``num_gpus=1`` and Ray schedules it as on the H200 (a process that ran a CPU task is not reused for
a GPU one). It checks the script's plumbing and that shards appear, and shows where the Ray run's fixed costs go
on this machine; its times are not the H200's.

Overhead = (ray wall − single wall) / single wall (target ≤ 5 %); the JSON also holds every entry's tune
seconds in both modes (the searches are bounded by seconds, so they should match) and the order of the runs
(``--order ray-first`` swaps them, to see whether order matters). Writes ``--out`` and prints a table.

**Wheels** (the H200 has no network and no Ray). Ray's cp312 manylinux wheel (79.3 MB) is larger than the device
tool's 64 MiB carry on its own, so ``benchmarks/gpu_ray_pack.sh`` (here, with network) packs a trimmed Ray into
``.whl-ray/`` (git-ignored): the wheel's tree without the Java jar, the dashboard's web front end, Ray's libraries
(data, serve, train, tune, rllib, air, llm), the autoscaler's cloud providers and tests, its ELF files stripped
(a 16.3 MB tar.xz), plus the wheels the device image lacks (Ray's jsonschema stack; gymnasium, stable-baselines3,
sb3-contrib, optuna with alembic, sqlalchemy, colorlog, mako and greenlet; diskcache): 23.8 MB, about 48 MB with the
tracked files. On the device, carrying ``[".whl-ray"]``::

    bash benchmarks/gpu_ray_setup.sh && . /tmp/site/ray-env.sh && python3 benchmarks/gpu_prewarm_ray.py --out "$OUT/prewarm_ray.json"

``gpu_ray_setup.sh`` installs both into ``/tmp/site``, writes the ``ray`` command and ``/tmp/site/ray-env.sh``
(PYTHONPATH, PATH), and checks ``ray start --head --num-gpus 1`` with one GPU task (about 15 s).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cmake-extension"


class DavHandler(http.server.BaseHTTPRequestHandler):
    """The WebDAV subset kbuild's HTTP tier and leases use, over a directory (``server.root``). MOVE is a rename
    under one lock, refused (412) when the destination exists and ``Overwrite: F``; 404 without the source."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def _file(self, url_path: str) -> Path:
        rel = unquote(urlsplit(url_path).path).lstrip("/")
        path = (self.server.root / rel).resolve()  # type: ignore[attr-defined]
        if not str(path).startswith(str(self.server.root.resolve())):  # type: ignore[attr-defined]
            raise PermissionError(url_path)
        return path

    def _answer(self, status: int, body: bytes = b"", *, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def do_GET(self, head: bool = False) -> None:
        path = self._file(self.path)
        if self.path.endswith("/"):
            if not path.is_dir():
                return self._answer(404, head=head)
            listing = [{"name": p.name, "type": "directory" if p.is_dir() else "file"} for p in sorted(path.iterdir())]
            return self._answer(200, json.dumps(listing).encode(), head=head)
        if not path.is_file():
            return self._answer(404, head=head)
        return self._answer(200, path.read_bytes(), head=head)

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path = self._file(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        self._answer(201)

    def do_DELETE(self) -> None:
        path = self._file(self.path)
        with self.lock:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            else:
                return self._answer(404)
        self._answer(204)

    def do_MOVE(self) -> None:
        src = self._file(self.path)
        dst = self._file(self.headers["Destination"])
        with self.lock:
            if not src.exists():
                return self._answer(404)
            if dst.exists():
                if self.headers.get("Overwrite", "T").upper() == "F":
                    return self._answer(412)
                shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
            if not dst.parent.is_dir():
                return self._answer(409)
            os.rename(src, dst)
        self._answer(201)


@contextlib.contextmanager
def dav_server(root: Path) -> Any:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), DavHandler)
    server.root = root  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def _level1_tried(art: Any) -> int | None:
    """How many configurations level 1 tried (None: no level 1, the kernel has no space)."""
    l1 = ((art.meta.get("tune_report") or {}).get("level1") or {}) if art is not None else {}
    return l1.get("tried")


def run_single(settings: Any, kernels: list[str], remote: str, dry_run: bool = False) -> dict[str, Any]:
    from kbuild.build.prewarm import prewarm, summary

    tuner = None
    if dry_run:  # the cost model in this process, the pipeline told that a GPU is here
        import kbuild.build.tunable as tunable
        from kbuild.prewarm.tasks import model_tuner

        tunable.has_gpu = lambda cc: True  # type: ignore[assignment]
        tuner = model_tuner
    t0 = time.perf_counter()
    builds = prewarm(settings, targets=["sm_90"], kernels=kernels, remote=remote, strict=True, tuner=tuner)
    wall = time.perf_counter() - t0
    rows = [summary(b) for b in builds]
    tune_s = {f"{b.spec.name}/{b.target.name}": (b.artefact.meta.get("tune_seconds") if b.artefact else None)
              for b in builds}
    tried = {f"{b.spec.name}/{b.target.name}": _level1_tried(b.artefact) for b in builds}
    return {"wall_s": round(wall, 3), "entries": rows, "tune_seconds": tune_s, "level1_tried": tried}


def shard_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Per entry with a configuration space: its compile shards (count, done, failed, retried, configurations,
    compile seconds, nodes)."""
    out = {}
    for e in result["entries"]:
        shards = e.get("shards") or []
        if shards:
            out[f"{e['kernel']}/{e['target']}"] = {
                "shards": len(shards), "done": sum(s.get("state") == "done" for s in shards),
                "failed": sum(s.get("state") == "failed" for s in shards),
                "retried": sum(len(s.get("attempts") or []) > 1 for s in shards),
                "configs": sum(len(s.get("configs") or []) for s in shards),
                "compile_seconds": round(sum(float(s.get("seconds") or 0.0) for s in shards), 3),
                "nodes": sorted({str(s.get("node")) for s in shards})}
    return out


@contextlib.contextmanager
def head(env: dict[str, str], dry_run: bool) -> Any:
    """The Ray head with one sm_90 GPU: ``ray start`` on the H200 (stopped with ``ray stop --force``); with
    ``dry_run``, ``ray.cluster_utils.Cluster`` (its processes stopped by their ids, nothing else touched).
    Yields the address."""
    if dry_run:
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": os.cpu_count() or 1, "num_gpus": 1, "resources": {"kbuild_sm_90": 1},
            "include_dashboard": False})
        try:
            yield cluster.address
        finally:
            cluster.shutdown()
        return
    subprocess.run(["ray", "start", "--head", "--num-gpus", "1", "--resources", '{"kbuild_sm_90": 1}',
                    "--include-dashboard=false", "--disable-usage-stats"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    try:
        yield "auto"
    finally:
        subprocess.run(["ray", "stop", "--force"], env=env, stdout=subprocess.DEVNULL, check=False)


def run_ray(settings: Any, kernels: list[str], remote: str, env: dict[str, str], ship: bool = True,
            dry_run: bool = False) -> dict[str, Any]:
    from kbuild.prewarm.ray_engine import prewarm_ray
    from kbuild.prewarm.tasks import model_tuner, shared_store

    t0 = time.perf_counter()
    with head(env, dry_run) as address:
        started = time.perf_counter() - t0
        t1, e1 = time.perf_counter(), time.time()
        result = prewarm_ray(settings, address=address, targets=["sm_90"], kernels=kernels, remote=remote,
                             ship=ship, backend="gpu", tuner=model_tuner if dry_run else None)
        wall = time.perf_counter() - t1
    from kbuild.build.prewarm import with_remote

    tune_s, tried = {}, {}
    with shared_store(with_remote(settings, remote)) as store:
        for e in result["entries"]:
            art = store.get(e["key"])
            tune_s[f"{e['kernel']}/{e['target']}"] = art.meta.get("tune_seconds") if art else None
            tried[f"{e['kernel']}/{e['target']}"] = _level1_tried(art)
    # From the call to the first task's start: driver set-up, ray.init (with the runtime_env upload when shipping)
    # and the node's worker start (with the runtime_env's unpacking).
    starts = [t["started"] for e in result["entries"] for t in (e, e.get("compile") or {}) if t.get("started")]
    first = round(min(starts) - e1, 3) if starts else None
    return {"wall_s": round(wall, 3), "ray_start_s": round(started, 3), "first_task_start_s": first,
            "timeline": timeline(result, e1), "shipped": result.get("shipped"), "summary": result,
            "tune_seconds": tune_s, "level1_tried": tried, "shards": shard_summary(result)}


def timeline(result: dict[str, Any], t0: float) -> dict[str, Any]:
    """Seconds from the call (``t0``, epoch) to each step of the Ray run: the driver's keys, joining the cluster
    (with the runtime_env upload when shipping), the first compile task's start and the last one's end, the first
    tune worker ready (its warm-up imports done), the first tune's start, the last tune's end; and the tune
    workers' warm-up seconds."""
    def rel(xs: list[Any], pick: Any) -> float | None:
        xs = [x for x in xs if x is not None]
        return round(pick(xs) - t0, 3) if xs else None

    entries = result["entries"]
    compiles = [e.get("compile") or {} for e in entries]
    workers = result.get("workers") or []
    phases = result.get("phases") or {}
    keys = phases.get("keys_seconds")
    return {"keys_done": keys,
            "ray_joined": round(keys + phases["ray_init_seconds"], 3) if keys is not None else None,
            "first_compile_start": rel([c.get("started") for c in compiles], min),
            "last_compile_end": rel([c.get("finished") for c in compiles], max),
            "first_worker_ready": rel([w.get("ready") for w in workers], min),
            "first_tune_start": rel([e.get("started") for e in entries], min),
            "last_tune_end": rel([e.get("finished") for e in entries], max),
            "worker_warm_seconds": [w.get("warm_seconds") for w in workers]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--kernel", action="append", help="kernels of examples/cmake-extension (default softmax, "
                                                      "layernorm; matmul_leaky_relu has a level-1 space)")
    ap.add_argument("--seconds", type=float, default=20.0, help="tuning budget per kernel (seconds)")
    ap.add_argument("--evaluations", type=int, default=200)
    ap.add_argument("--order", choices=["single-first", "ray-first"], default="single-first")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of both modes (each from empty tiers and caches); the overhead is of the medians")
    ap.add_argument("--no-ship", dest="ship", action="store_false",
                    help="ray mode without shipping the project and kbuild through runtime_env (as --no-ship)")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, no GPU: both modes on the cost model, the cluster from ray.cluster_utils (see above)")
    args = ap.parse_args()
    kernels = args.kernel or ["softmax", "layernorm"]

    from kbuild.device.probe import local_gpus

    gpus = [g for g in local_gpus() if g.cc == 90]
    if not gpus and not args.dry_run:
        print("error: no sm_90 GPU here; this benchmark measures on the H200", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="kbuild-prewarm-ray-"))
    project = work / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", "build", "dist"))
    from kbuild.settings.sources import load_settings

    results: dict[str, Any] = {}
    rounds: list[dict[str, float]] = []
    modes = ["single", "ray"] if args.order == "single-first" else ["ray", "single"]
    with dav_server(work / "dav") as url:
        for r in range(args.repeat):
            for mode in modes:
                # Each mode: an empty shared tier (its own prefix), an empty local store and an empty Triton cache.
                env = {**os.environ, "KBUILD_STORE": str(work / f"store-{mode}-{r}"),
                       "TRITON_CACHE_DIR": str(work / f"triton-{mode}-{r}"), "KBUILD_BUDGET_SECONDS": str(args.seconds),
                       "KBUILD_BUDGET_EVALUATIONS": str(args.evaluations), "KBUILD_TARGETS": "sm_90"}
                os.environ.update(env)  # this process (single) and the `ray start` children (ray) read the same
                settings = load_settings(project / "pyproject.toml")
                remote = f"{url}/{mode}-{r}"
                print(f"{mode} (round {r + 1}): prewarming {', '.join(kernels)} for sm_90 ...", file=sys.stderr, flush=True)
                results[mode] = run_single(settings, kernels, remote, args.dry_run) if mode == "single" else run_ray(
                    settings, kernels, remote, env, args.ship, args.dry_run)
            rounds.append({m: results[m]["wall_s"] for m in modes})
    single = statistics.median(x["single"] for x in rounds)
    ray_ = statistics.median(x["ray"] for x in rounds)
    overhead = (ray_ - single) / single
    failures = results["ray"]["summary"]["failures"]
    ok = overhead <= 0.05 and not failures  # a failed entry did less work: its time says nothing
    doc = {"benchmark": "gpu_prewarm_ray", "command": " ".join([sys.executable, *sys.argv]),
           "gpu": gpus[0].name if gpus else "none (dry run, cost model)", "dry_run": args.dry_run,
           "kernels": kernels, "budget": {"seconds": args.seconds, "evaluations": args.evaluations},
           "order": args.order, "ship": args.ship, "rounds": rounds, "median_wall_s": {"single": single, "ray": ray_},
           "single": results["single"], "ray": results["ray"],
           "overhead": round(overhead, 4), "target_overhead": 0.05, "meets_target": ok}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=str))
    print(f"{'mode':8} {'wall s':>8}  tune s per entry")
    for mode in ("single", "ray"):
        print(f"{mode:8} {results[mode]['wall_s']:8.1f}  {results[mode]['tune_seconds']}")
    print(f"ray: shipped={results['ray']['shipped']}, first task started {results['ray']['first_task_start_s']} s "
          "after the call")
    print(f"ray timeline (s from the call, last round): {results['ray']['timeline']}")
    if len(rounds) > 1:
        print(f"rounds (wall s): {rounds}; medians single {single:.1f}, ray {ray_:.1f}")
    for entry, sh in results["ray"]["shards"].items():
        print(f"ray: {entry}: {sh['shards']} compile shards ({sh['configs']} configurations, {sh['done']} done, "
              f"{sh['failed']} failed, {sh['retried']} retried) on {len(sh['nodes'])} node(s); level 1 tried "
              f"{results['ray']['level1_tried'].get(entry)} (single: {results['single']['level1_tried'].get(entry)})")
    print(f"ray start (not counted): {results['ray']['ray_start_s']:.1f} s; overhead {overhead:+.1%} "
          f"(target <= 5%): {'met' if ok else 'NOT met'}")
    if failures:
        print(f"ray failures: {failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
