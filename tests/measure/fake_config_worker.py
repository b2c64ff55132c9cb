"""A stand-in for the GPU worker's level-1 ops (``cfg_load``, ``cfg_add``, ``cfg_time``): a TEST FAKE.

The payload's cubin ends with a marker that picks the behaviour: ``#HANG`` (sleep forever while checked),
``#FAULT`` (a fault reply, then exit, like a sticky CUDA error), ``#OOR`` (out of resources: a candidate
error, the worker lives), ``#WRONG`` (wrong result), ``#TIMEHANG`` (checks fine, hangs when timed).
Timings are fake: 1.0 ms per launch. Every ``cfg_load`` is logged to ``--log``.
"""

from __future__ import annotations

import argparse
import time

from kbuild.tune.measure import protocol


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True)
    p.add_argument("--read-fd", type=int, required=True)
    p.add_argument("--write-fd", type=int, required=True)
    a = p.parse_args()
    kernels: dict[str, bytes] = {}
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
        if op == "cfg_load":
            with open(a.log, "a") as f:
                f.write("load\n")
            reply = {"ok": True, "kernel": msg["spec"], "arch": 90, "baseline_digest": "", "device": "fake"}
        elif op == "cfg_add":
            cubin = msg["payload"].cubin
            if cubin.endswith(b"#HANG"):
                time.sleep(3600)
            if cubin.endswith(b"#FAULT"):
                protocol.send(a.write_fd, {"ok": False, "kind": "fault", "error": "CUDA error: an illegal memory access"})
                return 3
            if cubin.endswith(b"#OOR"):
                reply = {"ok": False, "kind": "candidate", "error": "launch-error: OutOfResources: shared memory"}
            elif cubin.endswith(b"#WRONG"):
                reply = {"ok": True, "status": "wrong-result", "rel_err": 0.5, "error": "relative error 0.5 > 0.02"}
            else:
                kernels[msg["key"]] = cubin
                reply = {"ok": True, "status": "ok", "rel_err": 1e-3}
        elif op == "cfg_time":
            missing = [k for k in msg["keys"] if k not in kernels]
            if missing:
                reply = {"ok": False, "kind": "usage", "error": f"not loaded: {missing}"}
            elif any(kernels[k].endswith(b"#TIMEHANG") for k in msg["keys"]):
                time.sleep(3600)
            else:
                reply = {"ok": True, "samples": {k: [[1.0] * msg["reps"] for _ in range(msg["rounds"])]
                                                 for k in msg["keys"]}}
        protocol.send(a.write_fd, reply)


if __name__ == "__main__":
    raise SystemExit(main())
