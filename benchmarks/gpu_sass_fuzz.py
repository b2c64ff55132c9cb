"""GPU acceptance of the SASS engine: random legal reorderings must compute bit-identical results.

    python benchmarks/gpu_sass_fuzz.py                 # on the H200: writes $OUT/gpu_sass_fuzz.json
    python benchmarks/gpu_sass_fuzz.py --dry-run       # CPU only: builds and checks every candidate
    python benchmarks/gpu_sass_fuzz.py --kinds moves,far,yield,reuse,stall   # issue 15's edits mixed in

For every fixture kernel's sm_90 build (tests/fixtures/sass/kernels.py), the script

1. compiles it with Triton 3.6 for ``GPUTarget("cuda", 90, 32)`` (line info off) in a CPU worker;
2. draws ``--sequences`` random legal move sequences of depth 1..``--max-depth`` with kbuild.sass,
   spread over a pool of CPU processes; each candidate must pass the independent verifier and the
   re-decoding of its changed words before it is launched;
3. launches each candidate in a GPU worker process (multiprocessing *spawn*; the parent never touches
   CUDA) on fresh random inputs with NaN-poisoned outputs, next to the untouched cubin on the same
   inputs, and compares the outputs bit for bit. A worker evaluates a whole batch and is discarded
   and replaced after any fault (CUDA errors are sticky) or a hang.

JSON goes to ``$OUT/gpu_sass_fuzz.json`` (or ``--out``): counts per kernel, seeds, and every failure
with the moves that reproduce it. A short table is printed last. Exit status 0 only when there are no
wrong results, faults or hangs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "sass"
for p in (str(ROOT), str(FIXTURES)):
    if p not in sys.path:
        sys.path.insert(0, p)


# ------------------------------------------------------------------------------------------------
# CPU side (pool workers: no torch, no CUDA)
# ------------------------------------------------------------------------------------------------
def cpu_compile(name: str) -> tuple[str, bytes, str]:
    from kernels import SPECS, compile_spec

    spec = next(s for s in SPECS if s.name == name)
    ck = compile_spec(spec, 90)
    return name, ck.asm["cubin"], ck.name


_SCHED: dict[str, Any] = {}


def _schedule(name: str, cubin: bytes):
    key = hashlib.sha256(cubin).hexdigest()
    if key not in _SCHED:
        from kbuild.sass import Schedule, Verifier

        s = Schedule.from_cubin(cubin)
        _SCHED[key] = (s, Verifier(s.analysis, s.cubin))
    return _SCHED[key]


def seq_seed(base: int, name: str, q: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{base}:{name}:{q}".encode()).digest()[:8], "little")


def cpu_generate(name: str, cubin: bytes, base_seed: int, first: int, count: int, max_depth: int,
                 kinds: tuple[str, ...] | None = None) -> list[dict]:
    """Candidates ``first .. first+count-1`` of kernel ``name``; each verified and its changed words decoded."""
    import numpy as np

    from kbuild.sass.disasm import disassemble_raw
    from kbuild.sass.fuzz import random_edits, random_walk

    sched, verifier = _schedule(name, cubin)
    an = sched.analysis
    out = []
    changed: dict[int, list[tuple[int, int]]] = {}
    for q in range(first, first + count):
        seed = seq_seed(base_seed, name, q)
        rng = np.random.default_rng(seed)
        sched.reset()
        depth = int(rng.integers(1, max_depth + 1))
        if kinds is None:
            applied = random_walk(sched, depth, rng)
            per_kind = {"moves": applied}
        else:
            per_kind = random_edits(sched, depth, rng, kinds)
            applied = sum(per_kind.values())
        data = sched.to_cubin(verify=False)
        problems = verifier.check(data, expected_order=sched.order)
        moves = [list(r) for r in sched.records]
        for t, w in enumerate(sched.words()):
            if w != an.words[t]:
                changed.setdefault(w, []).append((len(out), int(sched.order[t])))
        out.append({"sequence": q, "seed": seed, "depth": depth, "applied": applied, "kinds": per_kind, "moves": moves,
                    "problems": problems[:5], "cubin": data if not problems else b""})
    words = list(changed)
    xs = sorted({x for v in changed.values() for _, x in v})
    blobs = [w.to_bytes(16, "little") for w in words] + [an.words[x].to_bytes(16, "little") for x in xs]
    dec = disassemble_raw(blobs, 90) if blobs else []
    want = {x: dec[len(words) + k][0].text.replace(".reuse", "") for k, x in enumerate(xs)}
    for k, w in enumerate(words):
        got = dec[k][0].text.replace(".reuse", "")
        for idx, x in changed[w]:
            cf = an.instructions[x].control_flow
            ok = (w & ~_CONTROL) == (an.words[x] & ~_CONTROL) if cf else got == want[x]
            if not ok:
                out[idx]["problems"].append(f"0x{16 * x:x} decodes to {got!r}, expected {want[x]!r}")
                out[idx]["cubin"] = b""
    return out


_CONTROL = ((1 << 21) - 1) << 105


# ------------------------------------------------------------------------------------------------
# GPU worker (spawned; owns CUDA; discarded after a fault)
# ------------------------------------------------------------------------------------------------
def gpu_worker(conn, name: str, base_cubin: bytes) -> None:
    try:
        import torch
        import triton
        from kernels import SPECS, compile_spec, launch_args

        spec = next(s for s in SPECS if s.name == name)
        torch.cuda.init()
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
        ck = compile_spec(spec, 90)
        same = ck.asm["cubin"] == base_cubin

        def clone(data: bytes):
            k = copy.copy(ck)
            k.kernel = data
            k.module = k.function = k._run = None
            return k

        ref = clone(base_cubin)
        conn.send(("ready", same))
        dev = torch.device("cuda")
        while True:
            msg = conn.recv()
            if msg is None:
                break
            idx, seed, data = msg
            try:
                gen = torch.Generator(device=dev).manual_seed(seed % (2**63))
                values, grid, outputs = spec.make_args(torch, dev, gen)
                ref[grid](*launch_args(spec, values))
                expected = {o: values[o].clone() for o in outputs}
                for o in outputs:
                    values[o].fill_(float("nan"))
                clone(data)[grid](*launch_args(spec, values))
                torch.cuda.synchronize()
                bad = []
                for o in outputs:
                    a, b = expected[o], values[o]
                    ai = a.view(torch.int16 if a.element_size() == 2 else torch.int32)
                    bi = b.view(torch.int16 if b.element_size() == 2 else torch.int32)
                    if not torch.equal(ai, bi):
                        diff = int((ai != bi).sum())
                        bad.append(f"{o}: {diff} of {ai.numel()} elements differ")
                    if torch.isnan(a).all():
                        bad.append(f"{o}: the reference output is all NaN (kernel did not write it)")
                conn.send((idx, "wrong" if bad else "ok", "; ".join(bad)))
            except Exception as exc:  # a CUDA fault poisons the context: report and die
                conn.send((idx, "fault", f"{type(exc).__name__}: {exc}"))
                break
    except Exception:
        try:
            conn.send(("crashed", traceback.format_exc()))
        except Exception:
            pass
    finally:
        conn.close()


def run_gpu(name: str, base_cubin: bytes, cands: list[dict], timeout: float, log) -> dict[int, tuple[str, str]]:
    """Launch every candidate; returns idx → (status, detail). Restarts the worker after faults/hangs."""
    ctx = mp.get_context("spawn")
    results: dict[int, tuple[str, str]] = {}
    todo = [i for i, c in enumerate(cands) if c["cubin"]]
    pos = 0
    restarts = 0
    while pos < len(todo):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=gpu_worker, args=(child, name, base_cubin), daemon=True)
        proc.start()
        child.close()
        if not parent.poll(300):
            proc.kill()
            raise RuntimeError(f"{name}: GPU worker did not start within 300 s")
        hello = parent.recv()
        if hello[0] != "ready":
            proc.kill()
            raise RuntimeError(f"{name}: GPU worker failed to start:\n{hello[1]}")
        if restarts == 0 and not hello[1]:
            log(f"  note: {name}: the GPU machine's compile differs from the CPU compile; using the CPU cubin")
        while pos < len(todo):
            i = todo[pos]
            c = cands[i]
            try:
                parent.send((i, c["seed"], c["cubin"]))
                if not parent.poll(timeout):
                    results[i] = ("hang", f"no answer within {timeout:.0f} s")
                    pos += 1
                    break
                idx, status, detail = parent.recv()
            except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
                results[i] = ("fault", f"worker died: {exc!r}")
                pos += 1
                break
            results[idx] = (status, detail)
            pos += 1
            if status == "fault":
                break
        else:
            parent.send(None)
        proc.join(5)
        if proc.is_alive():
            proc.kill()
        restarts += 1
    return results


# ------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=200)
    ap.add_argument("--max-depth", type=int, default=64)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--kernels", help="comma-separated subset of fixture kernel names")
    ap.add_argument("--cpu-workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--chunk", type=int, default=25, help="sequences per CPU task")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one candidate may take on the GPU")
    ap.add_argument("--dry-run", action="store_true", help="build and check every candidate; launch nothing")
    ap.add_argument("--kinds", default="", help="comma-separated edit kinds mixed into each sequence: "
                                               "moves,far,yield,reuse,stall (default: one-slot moves only)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", str(ROOT / "benchmarks" / "results")))
                    / "gpu_sass_fuzz.json")
    args = ap.parse_args()
    t_start = time.time()
    from kbuild.sass.fuzz import KINDS

    kinds = tuple(k for k in args.kinds.split(",") if k) or None
    if kinds is not None and (set(kinds) - set(KINDS)):
        ap.error(f"--kinds: unknown {sorted(set(kinds) - set(KINDS))}; choose from {','.join(KINDS)}")

    def log(msg: str) -> None:
        print(f"[{time.time() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    from kernels import SPECS

    names = [s.name for s in SPECS if 90 in s.archs]
    if args.kernels:
        wanted = args.kernels.split(",")
        unknown = set(wanted) - set(names)
        if unknown:
            ap.error(f"unknown kernels {sorted(unknown)}; choose from {names}")
        names = [n for n in names if n in wanted]
    ctx = mp.get_context("spawn")
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "sequences_per_kernel": args.sequences,
        "max_depth": args.max_depth, "seed": args.seed, "dry_run": args.dry_run,
        "kinds": list(kinds) if kinds else ["moves"], "kernels": {},
    }
    with ctx.Pool(min(args.cpu_workers, 64)) as pool:
        compiled = pool.map(cpu_compile, names)
        log(f"compiled {len(compiled)} kernels for sm_90")
        jobs = []
        for name, cubin, _kname in compiled:
            for first in range(0, args.sequences, args.chunk):
                jobs.append((name, cubin, args.seed, first, min(args.chunk, args.sequences - first), args.max_depth,
                             kinds))
        chunks = pool.starmap(cpu_generate, jobs)
    cands: dict[str, list[dict]] = {n: [] for n in names}
    for (name, *_rest), chunk in zip(jobs, chunks):
        cands[name].extend(chunk)
    log(f"built {sum(len(v) for v in cands.values())} candidates")
    exit_ok = True
    rows = []
    for name, cubin, kname in compiled:
        cs = cands[name]
        fixture = FIXTURES / f"{name}.sm90.cubin"
        rejected = [c for c in cs if not c["cubin"]]
        entry: dict[str, Any] = {
            "triton_kernel": kname, "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
            "matches_committed_fixture": fixture.exists() and fixture.read_bytes() == cubin,
            "sequences": len(cs), "moves_total": sum(c["applied"] for c in cs),
            "kind_counts": {k: sum(c["kinds"].get(k, 0) for c in cs) for k in (kinds or ("moves",))},
            "max_depth_reached": max((c["applied"] for c in cs), default=0),
            "rejected_on_cpu": len(rejected),
            "cpu_rejections": [{k: c[k] for k in ("sequence", "seed", "depth", "moves", "problems")}
                               for c in rejected[:5]],
        }
        from kbuild.sass import Schedule

        entry["pinned_fraction"] = round(Schedule.from_cubin(cubin).analysis.pinned_fraction(), 4)
        if rejected:
            exit_ok = False
        if not args.dry_run:
            t0 = time.time()
            res = run_gpu(name, cubin, cs, args.timeout, log)
            counts = {s: sum(1 for v in res.values() if v[0] == s) for s in ("ok", "wrong", "fault", "hang")}
            entry.update(counts, launched=len(res), gpu_seconds=round(time.time() - t0, 1))
            entry["failures"] = [
                {"sequence": cs[i]["sequence"], "seed": cs[i]["seed"], "depth": cs[i]["depth"],
                 "moves": cs[i]["moves"], "kinds": cs[i]["kinds"], "status": st, "detail": d}
                for i, (st, d) in sorted(res.items()) if st != "ok"]
            if counts["wrong"] or counts["fault"] or counts["hang"]:
                exit_ok = False
            log(f"{name}: {counts}")
        report["kernels"][name] = entry
        rows.append((name, entry["sequences"], entry.get("ok", "-"), entry.get("wrong", "-"), entry.get("fault", "-"),
                     entry.get("hang", "-"), entry["rejected_on_cpu"], entry["pinned_fraction"]))
    report["seconds"] = round(time.time() - t_start, 1)
    report["passed"] = exit_ok
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(f"\nwrote {args.out} in {report['seconds']} s")
    print(f"{'kernel':16s} {'seqs':>5s} {'ok':>5s} {'wrong':>5s} {'fault':>5s} {'hang':>5s} {'cpu-rej':>7s} {'pinned':>7s}")
    for r in rows:
        print(f"{r[0]:16s} {r[1]:5d} {r[2]!s:>5s} {r[3]!s:>5s} {r[4]!s:>5s} {r[5]!s:>5s} {r[6]:7d} {r[7]:7.3f}")
    print("PASS" if exit_ok else "FAIL")
    return 0 if exit_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
