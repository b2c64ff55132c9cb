"""Level 1's requests to the measurement worker survive candidate faults, hangs and lack of resources
(a fake worker speaking the real protocol: tests/measure/fake_config_worker.py, a TEST FAKE)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbuild.errors import UsageError
from kbuild.runtime.handover import KernelPayload
from kbuild.tune.measure.backend import KernelRef
from kbuild.tune.measure.client import ConfigWorkerClient

FAKE = Path(__file__).with_name("fake_config_worker.py")


def payload(marker: bytes = b"") -> KernelPayload:
    return KernelPayload(name="k", cubin=b"\x7fELF-not-really" + marker, metadata_json="{}", hash="0")


def loads(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.hostile(fault="level-1 config faults, hangs or runs out of resources", outcome="degraded with warning")
def test_faults_and_hangs_cost_the_candidate_not_the_search(tmp_path: Path) -> None:
    """Each bad configuration gets its status and reason; the worker restarts and the others keep being timed."""
    log = tmp_path / "loads.log"
    client = ConfigWorkerClient(command=[sys.executable, str(FAKE), "--log", str(log)], timeout_s=2.0,
                                load_timeout_s=20.0)
    try:
        info = client.load_spec(KernelRef("fake.module:spec"))
        assert info.arch == 90 and loads(log) == 1
        assert client.add("a", {}, payload())["status"] == "ok"
        assert client.add("b", {}, payload())["status"] == "ok"
        assert client.add("wrong", {}, payload(b"#WRONG"))["status"] == "wrong-result"
        oor = client.add("oor", {}, payload(b"#OOR"))
        assert oor["status"] == "launch-error" and "OutOfResources" in oor["error"]
        assert client.restarts == 0  # lack of resources leaves the worker alive
        fault = client.add("fault", {}, payload(b"#FAULT"))
        assert fault["status"] == "launch-error" and "illegal memory access" in fault["error"]
        hang = client.add("hang", {}, payload(b"#HANG"))
        assert hang["status"] == "timeout" and "watchdog" in hang["error"]
        assert client.restarts == 2
        # After the restarts the fresh worker holds nothing: the client re-adds what a batch needs.
        samples, failed = client.time_configs(["a", "b"], rounds=2, reps=3)
        assert failed == {} and samples["a"] == [[1.0] * 3] * 2 and set(samples) == {"a", "b"}
        assert loads(log) == 3
        # A configuration that hangs only when timed: found by timing one at a time, the others still timed.
        assert client.add("slow", {}, payload(b"#TIMEHANG"))["status"] == "ok"
        samples, failed = client.time_configs(["a", "slow", "b"], rounds=1, reps=2)
        assert set(failed) == {"slow"} and failed["slow"][0] == "timeout"
        assert set(samples) == {"a", "b"}
        with pytest.raises(UsageError, match="not added"):
            client.time_configs(["wrong"], rounds=1, reps=1)
    finally:
        client.close()
