"""The measurement worker process: ``python -m kbuild.tune.measure.worker --read-fd R --write-fd W``.

Reads requests from fd R and writes replies to fd W (:mod:`kbuild.tune.measure.protocol`): the SASS
level's ``load``/``check``/``time`` (:mod:`.session`) and level 1's ``cfg_load``/``cfg_add``/``cfg_time``
(:mod:`.config_session`). After
a CUDA error the context is unusable (errors are sticky), so the worker replies ``kind="fault"``
and exits; the parent starts a new one. Only this process touches the GPU.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from typing import Any

from . import protocol

log = logging.getLogger("kbuild.tune.measure.worker")


def _is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(s in text for s in ("cuda", "illegal", "launch failure", "misaligned", "unspecified", "trap",
                                   "out of resources", "accelerator"))


def _loaded(session: Any, baseline_digest: str, details: dict[str, Any]) -> dict[str, Any]:
    """The reply to a load: the kernel, this GPU's architecture and name, the baseline's digest and the oracle's
    findings on it (none for level 1's configurations)."""
    import torch

    return {"ok": True, "kernel": session.spec.name, "arch": session.arch, "baseline_digest": baseline_digest,
            "device": torch.cuda.get_device_name(0), "details": details}


def handle(state: dict[str, Any], msg: dict[str, Any]) -> dict[str, Any]:
    """Answer one request. May raise: the caller decides between a candidate error and a fault."""
    from .session import CandidateError, Session, SessionUsageError

    op = msg.get("op")
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "loaded": "session" in state}
    if op == "load":
        if msg.get("version") != protocol.PROTOCOL_VERSION:
            return {"ok": False, "kind": "usage", "error": f"protocol version {msg.get('version')} not supported"}
        state.pop("session", None)
        try:
            config = msg["config"]
            if msg.get("symbol"):  # a CUDA C++ kernel of an nvcc cubin
                from .cuda_session import CudaSession

                state["session"] = cuda = CudaSession(msg["spec"], str(msg["symbol"]), msg["baseline"],
                                                      small=bool(msg.get("small")),
                                                      python_path=tuple(msg.get("python_path", ())))
                return _loaded(cuda, cuda.baseline_digest, cuda.details)
            sess = Session(msg["spec"], config if isinstance(config, dict) else int(config), msg["baseline"], small=bool(msg.get("small")),
                           python_path=tuple(msg.get("python_path", ())))
        except SessionUsageError as exc:
            return {"ok": False, "kind": exc.kind, "error": str(exc)}
        state["session"] = sess
        return _loaded(sess, sess.baseline_digest, sess.details)
    if op in ("cfg_load", "cfg_add", "cfg_time"):
        return handle_config(state, msg)
    current: Session | None = state.get("session")
    if current is None:
        return {"ok": False, "kind": "usage", "error": "no kernel loaded"}
    sess = current
    try:
        if op == "check":
            return {"ok": True, **sess.check(msg["cubin"], int(msg["k"]), int(msg.get("seed", 0)))}
        if op == "time":
            return {"ok": True, "samples": sess.time(msg["cubin"], int(msg["rounds"]), int(msg["reps"]))}
        if op == "peers":
            return {"ok": True, **sess.peers(msg["cubin"], int(msg["rounds"]), int(msg["reps"]))}
    except CandidateError as exc:
        return {"ok": False, "kind": "candidate", "error": str(exc)}
    except SessionUsageError as exc:
        return {"ok": False, "kind": exc.kind, "error": str(exc)}
    return {"ok": False, "kind": "usage", "error": f"unknown op {op!r}"}


def handle_config(state: dict[str, Any], msg: dict[str, Any]) -> dict[str, Any]:
    """Level 1's requests (:mod:`kbuild.tune.measure.config_session`): load a spec, add a configuration's
    compiled kernel (checked against the reference), time configurations in one interleaved batch."""
    from kbuild.bench.spec import Config

    from .config_session import ConfigSession
    from .session import CandidateError, SessionUsageError

    op = msg["op"]
    if op == "cfg_load":
        if msg.get("version") != protocol.PROTOCOL_VERSION:
            return {"ok": False, "kind": "usage", "error": f"protocol version {msg.get('version')} not supported"}
        state.pop("configs", None)
        try:
            sess = ConfigSession(msg["spec"], small=bool(msg.get("small")),
                                 python_path=tuple(msg.get("python_path", ())))
        except SessionUsageError as exc:
            return {"ok": False, "kind": exc.kind, "error": str(exc)}
        state["configs"] = sess
        return _loaded(sess, "", {})
    current: ConfigSession | None = state.get("configs")
    if current is None:
        return {"ok": False, "kind": "usage", "error": "no spec loaded (cfg_load)"}
    try:
        if op == "cfg_add":
            return {"ok": True, **current.add(msg["key"], Config.from_dict(msg["config"]), msg["payload"])}
        return {"ok": True, "samples": current.time(list(msg["keys"]), int(msg["rounds"]), int(msg["reps"]))}
    except CandidateError as exc:
        return {"ok": False, "kind": "candidate", "error": str(exc)}
    except SessionUsageError as exc:
        return {"ok": False, "kind": exc.kind, "error": str(exc)}


def serve(read_fd: int, write_fd: int) -> int:
    state: dict[str, Any] = {}
    while True:
        try:
            msg = protocol.receive(read_fd)
        except protocol.ChannelClosed:
            return 0
        if msg.get("op") == "quit":
            protocol.send(write_fd, {"ok": True})
            return 0
        try:
            reply = handle(state, msg)
        except Exception as exc:
            # After anything unexpected during a launch the context may be poisoned: start afresh.
            fault = msg.get("op") in ("check", "time", "cfg_add", "cfg_time") or _is_cuda_fault(exc)
            log.debug("request %s failed:\n%s", msg.get("op"), traceback.format_exc())
            kind = "fault" if fault else "error"
            protocol.send(write_fd, {"ok": False, "kind": kind, "error": f"{type(exc).__name__}: {exc}".strip()[:2000]})
            if fault:
                return 3
            continue
        protocol.send(write_fd, reply)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kbuild.tune.measure.worker")
    parser.add_argument("--read-fd", type=int, required=True)
    parser.add_argument("--write-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return serve(args.read_fd, args.write_fd)


if __name__ == "__main__":
    raise SystemExit(main())
