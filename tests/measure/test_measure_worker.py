"""The worker protocol and its fault isolation, with a fake worker that crashes, exits, hangs or faults."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbuild.errors import GPUUnavailableError, UsageError
from kbuild.tune.measure import protocol
from kbuild.tune.measure.backend import Backend, KernelRef
from kbuild.tune.measure.cache import CachedBackend
from kbuild.tune.measure.client import WorkerClient

FAKE = Path(__file__).with_name("fake_worker.py")
KERNEL = KernelRef("fake.module:spec")


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "loads.log"


def client(log: Path, *extra: str, timeout_s: float = 20.0) -> WorkerClient:
    return WorkerClient(command=[sys.executable, str(FAKE), "--log", str(log), *extra], timeout_s=timeout_s,
                        load_timeout_s=20.0)


def loads(log: Path) -> list[str]:
    return log.read_text().split("\n")[:-1] if log.exists() else []


def test_client_is_a_backend(log: Path) -> None:
    assert isinstance(client(log), Backend)


def test_protocol_roundtrip_and_timeout() -> None:
    import os

    r, w = os.pipe()
    try:
        protocol.send(w, {"op": "x", "blob": b"\0" * 10_000})
        assert protocol.receive(r, 5.0) == {"op": "x", "blob": b"\0" * 10_000}
        with pytest.raises(protocol.ChannelTimeout):
            protocol.receive(r, 0.2)
    finally:
        os.close(w)
    with pytest.raises(protocol.ChannelClosed):
        protocol.receive(r, 1.0)
    os.close(r)


@pytest.mark.parametrize(("marker", "expect"), [(b"#CRASH", "crash: worker killed by signal SIGSEGV"),
                                                 (b"#EXIT", "crash: worker exited with status 7"),
                                                 (b"#FAULT", "fault: CUDA error: an illegal memory access")])
def test_bad_candidate_is_invalid_and_worker_restarts(log: Path, cubins: dict[int, bytes], marker: bytes,
                                                      expect: str) -> None:
    with client(log) as c:
        info = c.load(KERNEL, cubins[90])
        assert info.arch == 90
        assert c.check(cubins[90]).valid
        bad = c.check(cubins[90] + marker)
        assert not bad.valid
        assert bad.reason is not None and bad.reason.startswith(expect)
        # The caller carries on: the next candidate gets a fresh worker that reloaded the baseline.
        good = c.check(cubins[90], k=10)
        assert good.valid and good.k == 10
        assert c.restarts == 1
        pids = {line.split()[1] for line in loads(log)}
        assert len(loads(log)) == 2 and len(pids) == 2


def test_hang_is_killed_by_the_watchdog(log: Path, cubins: dict[int, bytes]) -> None:
    with client(log, timeout_s=1.0) as c:
        c.load(KERNEL, cubins[90])
        hung = c.time(cubins[90] + b"#HANG", rounds=2, reps=2)
        assert not hung.valid and hung.reason is not None and hung.reason.startswith("hang:")
        res = c.time(cubins[90] + b"#SLOW", rounds=4, reps=5)
        assert res.valid and res.ratio == pytest.approx(1.1)
        assert res.ci[0] <= res.ratio <= res.ci[1]
        assert res.aa_ratio == pytest.approx(1.0, abs=0.01)
        assert len(loads(log)) == 2


def test_mismatch_is_invalid_without_restart(log: Path, cubins: dict[int, bytes]) -> None:
    with client(log) as c:
        c.load(KERNEL, cubins[90])
        res = c.check(cubins[90] + b"#MISMATCH")
        assert not res.valid and "differ bitwise" in (res.reason or "")
        assert c.restarts == 0


def test_cubin_for_another_architecture_is_refused_before_running(log: Path, cubins: dict[int, bytes]) -> None:
    with client(log) as c:
        c.load(KERNEL, cubins[90])
        res = c.check(cubins[80])
        assert not res.valid and res.reason == "cubin is for sm_80, the loaded kernel runs on sm_90"
        assert not res.executed
        assert not c.check(b"not a cubin").valid
        assert not c.time(cubins[80]).valid


def test_no_gpu_is_a_clear_usage_error(log: Path, cubins: dict[int, bytes]) -> None:
    with client(log, "--no-gpu") as c, pytest.raises(GPUUnavailableError, match="no sm_90 GPU here"):
        c.load(KERNEL, cubins[90])


def test_check_before_load_is_a_usage_error(log: Path, cubins: dict[int, bytes]) -> None:
    with client(log) as c, pytest.raises(UsageError, match="nothing loaded"):
        c.check(cubins[90])


def test_cached_backend_skips_known_candidates(log: Path, cubins: dict[int, bytes]) -> None:
    with client(log) as c:
        cached = CachedBackend(c)
        cached.load(KERNEL, cubins[90])
        bad = cubins[90] + b"#CRASH"
        assert not cached.check(bad).valid
        # Same .text bytes (the marker lies outside every section): a cache hit, no second crash.
        assert not cached.check(bad, k=10).valid
        assert not cached.time(bad).valid
        assert c.restarts == 1 and cached.stats.hits == 2


def test_real_worker_without_gpu_says_so(cubins: dict[int, bytes]) -> None:
    """The real worker module, on this GPU-less machine: a clear error, not a traceback."""
    with WorkerClient(timeout_s=60, load_timeout_s=120) as c, \
            pytest.raises(GPUUnavailableError, match="no sm_90 GPU here; measurement needs one"):
        c.load(KernelRef("kbuild.bench.kernels.softmax:softmax", small=True), cubins[90])


# ----------------------------------------------------------------------------------------------
# What the sessions share (kbuild.tune.measure.session.BaselineSession), on the CPU: a candidate for another
# architecture is refused before it is loaded, each candidate is given back once judged (also when the oracle
# refuses the baseline), and timing interleaves baseline, candidate, baseline.

def test_a_baseline_session_checks_times_and_gives_back_each_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbuild.tune.measure import session as sessions
    from kbuild.tune.measure.oracle import BaselineProblem

    cubin = (Path(__file__).parents[1] / "fixtures" / "cubins" / "softmax.sm86.cubin").read_bytes()
    other = (Path(__file__).parents[1] / "fixtures" / "cubins" / "softmax.sm89.cubin").read_bytes()
    loaded: list[str] = []
    released: list[str] = []

    class Oracle:
        def check(self, baseline: str, candidate: str, k: int, seed: int) -> dict[str, object]:
            if seed < 0:
                raise BaselineProblem("the baseline is not deterministic")
            return {"valid": True, "pair": (baseline, candidate, k, seed)}

    class Stub(sessions.BaselineSession):
        def __init__(self) -> None:
            self.arch, self.baseline, self.oracle, self.flush = 86, "baseline", Oracle(), "flush"  # type: ignore[assignment]

        def _load(self, cubin: bytes) -> str:
            loaded.append("candidate")
            return "candidate"

        def _launchers(self, kernels: list[str]) -> list[object]:  # type: ignore[override]  # names stand in for launchers
            return list(kernels)

        def _release(self, kernel: str) -> None:
            released.append(kernel)

    def interleaved(runs: list[str], *, rounds: int, reps: int, flush: str) -> list[list[list[float]]]:
        assert runs == ["baseline", "candidate", "baseline"] and flush == "flush"
        return [[[float(i)] * reps] * rounds for i in range(3)]

    monkeypatch.setattr(sessions.timing, "time_interleaved", interleaved)
    s = Stub()
    assert s.check(cubin, 3, 5) == {"valid": True, "pair": ("baseline", "candidate", 3, 5)}
    with pytest.raises(sessions.SessionUsageError, match="not deterministic"):
        s.check(cubin, 3, -1)
    assert s.time(cubin, 2, 1) == {"baseline": [[0.0]] * 2, "candidate": [[1.0]] * 2, "baseline_aa": [[2.0]] * 2}
    assert released == ["candidate"] * 3 == loaded
    with pytest.raises(sessions.CandidateError, match="sm_89 but this GPU is sm_86"):
        s.check(other, 3, 5)
    with pytest.raises(sessions.CandidateError, match="not a cubin"):
        s.time(b"not a cubin", 1, 1)
    assert len(loaded) == 3  # refused before anything was loaded
