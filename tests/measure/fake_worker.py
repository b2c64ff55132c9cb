"""A stand-in for the GPU worker that speaks the real protocol and misbehaves on request.

The candidate's trailing marker picks the behaviour: ``#CRASH`` (SIGSEGV), ``#EXIT`` (exit 7),
``#HANG`` (sleep forever), ``#FAULT`` (a fault reply, then exit, like a sticky CUDA error),
``#MISMATCH`` (a valid run that differs from the baseline), ``#SLOW`` (timed 10 % slower).
Every ``load`` is appended to the file named by ``--log``, so tests can see reloads after restarts.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from kbuild.tune.measure import protocol
from kbuild.tune.measure.cubin import cubin_arch, cubin_digest


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True)
    p.add_argument("--no-gpu", action="store_true")
    p.add_argument("--read-fd", type=int, required=True)
    p.add_argument("--write-fd", type=int, required=True)
    a = p.parse_args()
    loaded = None
    while True:
        try:
            msg = protocol.receive(a.read_fd)
        except protocol.ChannelClosed:
            return 0
        op = msg["op"]
        reply: dict = {"ok": True}
        if op == "quit":
            protocol.send(a.write_fd, reply)
            return 0
        if op == "load":
            with open(a.log, "a") as f:
                f.write(f"load {os.getpid()}\n")
            if a.no_gpu:
                reply = {"ok": False, "kind": "no-gpu", "error": "no sm_90 GPU here; measurement needs one"}
            else:
                loaded = msg["baseline"]
                reply = {"ok": True, "kernel": msg["spec"], "arch": cubin_arch(loaded),
                         "baseline_digest": cubin_digest(loaded), "device": "fake"}
        elif op in ("check", "time"):
            cubin = msg["cubin"]
            if cubin.endswith(b"#CRASH"):
                os.kill(os.getpid(), signal.SIGSEGV)
            if cubin.endswith(b"#EXIT"):
                os._exit(7)
            if cubin.endswith(b"#HANG"):
                time.sleep(3600)
            if cubin.endswith(b"#FAULT"):
                protocol.send(a.write_fd, {"ok": False, "kind": "fault", "error": "CUDA error: an illegal memory access"})
                return 3
            if op == "check":
                bad = cubin.endswith(b"#MISMATCH")
                reply = {"ok": True, "valid": not bad, "k": msg["k"],
                         "reason": "output 'y': 3 elements differ bitwise" if bad else None}
            else:
                scale = 1.1 if cubin.endswith(b"#SLOW") else 1.0
                r, n = msg["rounds"], msg["reps"]
                base = [[1.0 + 0.001 * ((i * 7 + j) % 5) for i in range(n)] for j in range(r)]
                reply = {"ok": True, "samples": {"baseline": base,
                                                 "candidate": [[x * scale for x in row] for row in base],
                                                 "baseline_aa": [list(reversed(row)) for row in base]}}
        protocol.send(a.write_fd, reply)


if __name__ == "__main__":
    raise SystemExit(main())
