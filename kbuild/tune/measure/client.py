"""The parent side of the GPU measurement worker: a :class:`Backend` that never touches CUDA itself.

The worker (``python -m kbuild.tune.measure.worker``) runs in its own process and talks over two
pipes (:mod:`kbuild.tune.measure.protocol`). When it faults (illegal address, launch failure),
dies, or does not answer within the watchdog timeout, the client kills it, marks the candidate
invalid with the reason, and starts a fresh worker (replaying ``load``) on the next request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from kbuild.device import stats
from kbuild.errors import GPUUnavailableError, MeasureError, UsageError

from . import protocol
from .backend import GPU_BACKEND, K_SEARCH, CheckResult, KernelRef, LoadInfo, TimeResult
from .cubin import CubinFormatError, cubin_arch

log = logging.getLogger(__name__)


class WorkerFailure(Exception):
    """The worker faulted, died or hung while handling a request."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def default_command() -> list[str]:
    return [sys.executable, "-m", "kbuild.tune.measure.worker"]


class WorkerClient:
    """:class:`~kbuild.tune.measure.backend.Backend` backed by an isolated GPU worker process.

    ``command`` starts the worker; it gets ``--read-fd R --write-fd W`` appended. ``timeout_s`` is
    the watchdog for ``check``/``time`` requests, ``load_timeout_s`` for ``load`` (it compiles)."""

    name = GPU_BACKEND

    def __init__(self, *, command: Sequence[str] | None = None, timeout_s: float = 60.0,
                 load_timeout_s: float = 300.0, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.command = list(command) if command else default_command()
        self.timeout_s = timeout_s
        self.load_timeout_s = load_timeout_s
        self.env = env
        self.cwd = cwd
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._to_worker: int | None = None
        self._from_worker: int | None = None
        self._stderr: Any = None
        self._load_msg: dict[str, Any] | None = None
        self._loaded = False
        self._info: LoadInfo | None = None
        self._seed = 0

    # -- process management -------------------------------------------------------------------
    def _start(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self._stderr = tempfile.TemporaryFile()
        cmd = [*self.command, "--read-fd", str(req_r), "--write-fd", str(rep_w)]
        try:
            self._proc = subprocess.Popen(cmd, pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
                                          stdout=self._stderr, stderr=self._stderr, env=self.env, cwd=self.cwd,
                                          start_new_session=True)
        except OSError as exc:
            for fd in (req_r, req_w, rep_r, rep_w):
                os.close(fd)
            raise MeasureError(f"cannot start the measurement worker {cmd[0]!r}: {exc}") from None
        os.close(req_r)
        os.close(rep_w)
        self._to_worker, self._from_worker = req_w, rep_r
        self._loaded = False
        log.debug("worker started: pid %d", self._proc.pid)

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            data: bytes = self._stderr.read()
        except (OSError, ValueError):
            return ""
        return data.decode("utf-8", "replace")[-limit:].strip()

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its own session
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        for fd in (self._to_worker, self._from_worker):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._proc = None
        self._to_worker = self._from_worker = None
        self._loaded = False

    def _exit_description(self) -> str:
        proc = self._proc
        if proc is None:
            return "worker gone"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        rc = proc.returncode
        if rc is None:
            return "worker closed its pipe"
        if rc < 0:
            try:
                return f"worker killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"worker killed by signal {-rc}"
        return f"worker exited with status {rc}"

    def _request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and wait for its reply; :class:`WorkerFailure` when the worker faults, dies or hangs."""
        if self._proc is None:
            self._start()
        assert self._to_worker is not None and self._from_worker is not None
        try:
            protocol.send(self._to_worker, message)
            reply: dict[str, Any] = protocol.receive(self._from_worker, timeout)
        except protocol.ChannelTimeout:
            self._kill()
            self.restarts += 1
            raise WorkerFailure(f"hang: no answer within {timeout:g} s (watchdog); worker killed") from None
        except (protocol.ChannelClosed, BrokenPipeError) as exc:
            what = self._exit_description()
            tail = self._stderr_tail()
            self._kill()
            self.restarts += 1
            raise WorkerFailure(f"crash: {what}" + (f"; last output: {tail[-500:]}" if tail else "")) from exc
        if not reply.get("ok") and reply.get("kind") == "fault":
            self._kill()
            self.restarts += 1
            raise WorkerFailure(f"fault: {reply.get('error')}")
        return reply

    def _ensure_loaded(self) -> None:
        if self._load_msg is None:
            raise UsageError("nothing loaded: call load(kernel, baseline) first")
        if self._proc is not None and self._loaded:
            return
        try:
            reply = self._request(self._load_msg, self.load_timeout_s)
        except WorkerFailure as exc:
            raise MeasureError(f"the measurement worker failed while loading the baseline: {exc.reason}") from None
        if not reply.get("ok"):
            error = str(reply.get("error"))
            if reply.get("kind") == "no-gpu":
                raise GPUUnavailableError(error)
            if reply.get("kind") == "usage":
                raise UsageError(error)
            raise MeasureError(f"loading the baseline failed: {error}")
        self._loaded = True
        self._info = LoadInfo(backend=self.name, kernel=reply["kernel"], arch=reply["arch"],
                              baseline_digest=reply["baseline_digest"], device=reply.get("device", ""),
                              details=reply.get("details", {}))

    # -- Backend -------------------------------------------------------------------------------
    def load(self, kernel: KernelRef, baseline: bytes) -> LoadInfo:
        """Start (or reuse) the worker and load ``baseline`` for ``kernel``; raises if that fails."""
        try:
            cubin_arch(baseline)
        except CubinFormatError as exc:
            raise UsageError(f"baseline for {kernel.spec}: {exc}") from None
        self._load_msg = {"op": "load", "version": protocol.PROTOCOL_VERSION, "spec": kernel.spec,
                          "config": kernel.config, "small": kernel.small, "python_path": list(kernel.python_path),
                          "baseline": baseline}
        if kernel.symbol is not None:
            self._load_msg["symbol"] = kernel.symbol
        self._loaded = False
        self._ensure_loaded()
        assert self._info is not None
        return self._info

    def _candidate_problem(self, candidate: bytes) -> str | None:
        try:
            arch = cubin_arch(candidate)
        except CubinFormatError as exc:
            return f"not a cubin: {exc}"
        if self._info is not None and arch != self._info.arch:
            return f"cubin is for sm_{arch}, the loaded kernel runs on sm_{self._info.arch}"
        return None

    def check(self, candidate: bytes, k: int = K_SEARCH, *, seed: int | None = None) -> CheckResult:
        self._ensure_loaded()
        if seed is None:
            self._seed += 1
            seed = self._seed
        problem = self._candidate_problem(candidate)
        if problem:
            return CheckResult(valid=False, backend=self.name, reason=problem, executed=False)
        try:
            reply = self._request({"op": "check", "cubin": candidate, "k": k, "seed": seed},
                                  self.timeout_s + 2.0 * k)
        except WorkerFailure as exc:
            return CheckResult(valid=False, backend=self.name, reason=exc.reason)
        if not reply.get("ok"):
            return CheckResult(valid=False, backend=self.name, reason=f"{reply.get('kind')}: {reply.get('error')}")
        return CheckResult(valid=bool(reply["valid"]), backend=self.name, k=int(reply.get("k", k)),
                           reason=reply.get("reason"), details=reply.get("details", {}))

    def time(self, candidate: bytes, *, rounds: int = 8, reps: int = 10) -> TimeResult:
        self._ensure_loaded()
        problem = self._candidate_problem(candidate)
        if problem:
            return TimeResult.invalid(self.name, problem)
        try:
            reply = self._request({"op": "time", "cubin": candidate, "rounds": rounds, "reps": reps},
                                  self.timeout_s + 0.05 * rounds * reps)
        except WorkerFailure as exc:
            return TimeResult.invalid(self.name, exc.reason)
        if not reply.get("ok"):
            return TimeResult.invalid(self.name, f"{reply.get('kind')}: {reply.get('error')}")
        return time_result(self.name, reply["samples"], seed=int.from_bytes(candidate[-4:], "little"))

    def peers(self, candidate: bytes, *, rounds: int = 8, reps: int = 10) -> dict[str, Any]:
        """``candidate`` (the loaded configuration's schedule that ships) timed interleaved with the loaded spec's
        peers (:meth:`kbuild.tune.measure.session.BaselineSession.peers`); ``{"error": reason}`` when the worker
        could not (a fault, a usage error), so that a report says why instead of failing the build."""
        self._ensure_loaded()
        problem = self._candidate_problem(candidate)
        if problem:
            return {"error": problem}
        try:
            reply = self._request({"op": "peers", "cubin": candidate, "rounds": rounds, "reps": reps},
                                  self.timeout_s + 0.05 * rounds * reps * 4)
        except WorkerFailure as exc:
            return {"error": exc.reason}
        if not reply.get("ok"):
            return {"error": f"{reply.get('kind')}: {reply.get('error')}"}
        return {k: v for k, v in reply.items() if k != "ok"}

    def ping(self) -> dict[str, Any]:
        return self._request({"op": "ping"}, self.timeout_s)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None and self._to_worker is not None:
            with contextlib.suppress(OSError, protocol.ChannelClosed, protocol.ChannelTimeout):
                protocol.send(self._to_worker, {"op": "quit"})
                assert self._from_worker is not None
                protocol.receive(self._from_worker, 5.0)
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self._kill()


class ConfigWorkerClient(WorkerClient):
    """Level 1's side of the same worker process: one spec loaded, many configurations' kernels added
    (compiled elsewhere: :mod:`kbuild.runtime.handover`), checked and timed in interleaved batches.

    A fault, crash or hang costs the configuration that caused it (status ``launch-error`` or ``timeout``)
    and the worker; the next request starts a fresh worker, replays ``cfg_load`` and re-adds the kernels it
    needs. A batch that breaks while timing is retimed one configuration at a time for a single round to
    find the culprit, then timed again without it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._payloads: dict[str, tuple[dict[str, Any], Any]] = {}
        self._in_worker: set[str] = set()

    def _ensure_loaded(self) -> None:
        if not (self._proc is not None and self._loaded):
            self._in_worker.clear()  # a fresh worker holds no kernels
        super()._ensure_loaded()

    def load_spec(self, kernel: KernelRef) -> LoadInfo:
        """Start (or reuse) the worker and load ``kernel``'s spec (inputs, reference, L2 flush buffer)."""
        self._load_msg = {"op": "cfg_load", "version": protocol.PROTOCOL_VERSION, "spec": kernel.spec,
                          "small": kernel.small, "python_path": list(kernel.python_path)}
        self._loaded = False
        self._payloads.clear()
        self._ensure_loaded()
        assert self._info is not None
        return self._info

    def add(self, key: str, config: dict[str, Any], payload: Any) -> dict[str, Any]:
        """Load and check one configuration's kernel: ``{"status", "rel_err", "error", "registers", "spills"}``."""
        self._ensure_loaded()
        try:
            reply = self._request({"op": "cfg_add", "key": key, "config": config, "payload": payload},
                                  self.timeout_s)
        except WorkerFailure as exc:
            status = "timeout" if exc.reason.startswith("hang") else "launch-error"
            return {"status": status, "error": exc.reason}
        if not reply.get("ok"):
            if reply.get("kind") in ("usage", "no-gpu"):
                raise UsageError(str(reply.get("error")))
            return {"status": "launch-error", "error": f"{reply.get('kind')}: {reply.get('error')}"}
        out = {k: v for k, v in reply.items() if k != "ok"}
        if out.get("status") == "ok":
            self._payloads[key] = (config, payload)
            self._in_worker.add(key)
        return out

    def _readd(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        failed: dict[str, tuple[str, str]] = {}
        for key in keys:
            self._ensure_loaded()
            if key in self._in_worker:
                continue
            config, payload = self._payloads[key]
            reply = self.add(key, config, payload)
            if reply.get("status") != "ok":
                failed[key] = (str(reply.get("status")), f"after a worker restart: {reply.get('error')}")
        return failed

    def _time_once(self, keys: Sequence[str], rounds: int, reps: int) -> dict[str, list[list[float]]]:
        reply = self._request({"op": "cfg_time", "keys": list(keys), "rounds": rounds, "reps": reps},
                              self.timeout_s + 0.05 * rounds * reps * len(keys))
        if not reply.get("ok"):
            raise WorkerFailure(f"{reply.get('kind')}: {reply.get('error')}")
        samples: dict[str, list[list[float]]] = reply["samples"]
        return samples

    def time_configs(self, keys: Sequence[str], *, rounds: int, reps: int
                     ) -> tuple[dict[str, list[list[float]]], dict[str, tuple[str, str]]]:
        """Samples ``[round][rep]`` per key, timed interleaved; and the keys that broke (status, reason)."""
        unknown = [k for k in keys if k not in self._payloads]
        if unknown:
            raise UsageError(f"not added (or not ok): {unknown}")
        failed = self._readd(keys)
        live = [k for k in keys if k not in failed]
        try:
            return self._time_once(live, rounds, reps), failed
        except WorkerFailure as exc:
            log.debug("batch of %d failed (%s); timing one at a time", len(live), exc.reason)
        for key in live:  # find the culprit(s): one round each, alone
            failed.update(self._readd([key]))
            if key in failed:
                continue
            try:
                self._time_once([key], 1, 1)
            except WorkerFailure as exc:
                failed[key] = ("timeout" if exc.reason.startswith("hang") else "launch-error", exc.reason)
                self._payloads.pop(key, None)
        live = [k for k in live if k not in failed]
        failed.update(self._readd(live))
        live = [k for k in live if k not in failed]
        try:
            return (self._time_once(live, rounds, reps) if live else {}), failed
        except WorkerFailure as exc:
            return {}, {**failed, **{k: ("launch-error", f"batch failed twice: {exc.reason}") for k in live}}


def time_result(backend: str, samples: dict[str, list[list[float]]], *, seed: int = 0) -> TimeResult:
    """Turn interleaved samples (``baseline``, ``candidate``, ``baseline_aa``; ms per launch) into a result."""
    base, cand, aa = samples["baseline"], samples["candidate"], samples["baseline_aa"]
    ratio, lo, hi = stats.ratio_ci(base, cand, seed=seed)
    aa_ratio, aa_lo, aa_hi = stats.ratio_ci(base, aa, seed=seed + 1)
    return TimeResult(backend=backend, ratio=ratio, ci=(lo, hi), aa_ratio=aa_ratio, aa_ci=(aa_lo, aa_hi),
                      baseline_ms=stats.median(base), candidate_ms=stats.median(cand), samples=samples)


