"""``kbuild prewarm --ray`` on a real local Ray cluster (a head and two worker processes) writing into a real
nginx WebDAV tier, on the cost-model backend (the CPU stand-in for GPU measurements: every result says so, is
stored under its own key and never ships).

One run sees a worker node killed while it tunes and a stand-in GPU fault in one kernel: the killed task is
retried on the other node, the fault is reported with its node, GPU and error, and every other entry ends up in
the shared tier exactly once, tuned to the end exactly once. A second run resumes: it finds what is stored, and
waits on a lease another prewarm holds until it expires, then tunes that entry."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import stand_in

from kbuild.cache import backend_for_url
from kbuild.cache.lease import leases_for
from kbuild.cli import main
from kbuild.prewarm.ray_engine import prewarm_ray
from kbuild.prewarm.tasks import shared_store

pytestmark = [pytest.mark.nginx, pytest.mark.slow]
ray = pytest.importorskip("ray", reason="kbuild[ray] is not installed")

FAULT = ("layernorm", "sm_80")


@pytest.fixture
def settings(entry_settings: Any) -> Any:
    return entry_settings


def _stored_records(root: Path, prefix: str) -> list[str]:
    ac = root / prefix / "ac"
    return sorted(p.name for p in ac.iterdir()) if ac.is_dir() else []


def test_a_node_killed_mid_tune_and_a_gpu_fault_still_store_every_entry_once(settings, dav_server, ray_cluster,
                                                                              tmp_path: Path) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    remote = f"{dav_server.url}/{prefix}"
    log = str(tmp_path / "tune-events.jsonl")
    tuner = stand_in.RecordingModelTuner(log, faults=(FAULT,))
    killed: dict[str, Any] = {}  # when (time.time()) and which entry's key

    def kill_a_worker_mid_tune(entries: Any) -> None:
        if killed:
            return
        ev = stand_in.events(log)
        done = {x["key"] for x in ev if x["event"] == "finish"}
        busy = [x for x in ev if x["event"] == "start" and x["key"] not in done and (x["kernel"], x["target"]) != FAULT
                and time.time() - x["time"] > 0.5]
        if busy:  # a node in the middle of a tune: kill it (its raylet and every worker process on it)
            (node,) = [n for n in ray_cluster.workers if n.node_id == busy[0]["node"]]
            ray_cluster.cluster.remove_node(node)
            killed.update(at=time.time(), key=busy[0]["key"])

    t0 = time.time()
    # ship=False: these nodes share this checkout, so a new job's runtime_env setup would only add time; shipping
    # is test_ship.py's.
    result = prewarm_ray(settings, address=ray_cluster.address, remote=remote, backend="model", lease_seconds=20,
                         tuner=tuner, on_update=kill_a_worker_mid_tune, ship=False)
    seconds = time.time() - t0
    assert killed, ("the run ended before a worker could be killed mid-tune", json.dumps(result["entries"]))
    by_entry = {(e["kernel"], e["target"]): e for e in result["entries"]}
    assert len(by_entry) == 6

    # The stand-in GPU fault: reported with the node, its GPU and the error; the rest is not lost.
    (failure,) = result["failures"]
    assert (failure["kernel"], failure["target"]) == FAULT
    assert "illegal memory access" in failure["error"] and failure["node"] and failure["gpu"] == "none"
    tuned = {k: e for k, e in by_entry.items() if k != FAULT}
    assert {e["state"] for e in tuned.values()} == {"tuned"}, result["entries"]

    # Every entry but the faulty one is in the shared tier exactly once, tuned to the end exactly once.
    ev = stand_in.events(log)
    for (kernel, target), e in tuned.items():
        finishes = [x for x in ev if x["event"] == "finish" and x["key"] == e["key"]]
        assert len(finishes) == 1, (kernel, target, finishes)
    assert FAULT not in {(x["kernel"], x["target"]) for x in ev if x["event"] == "finish"}
    records = _stored_records(dav_server.root, prefix)
    assert len(records) == len(set(records))
    assert {e["key"] for e in tuned.values()} <= set(records)
    assert by_entry[FAULT]["key"] not in records
    # The killed task was retried elsewhere: some entry started twice, in two worker processes.
    starts: dict[str, set[int]] = {}
    for x in ev:
        if x["event"] == "start":
            starts.setdefault(x["key"], set()).add(x["pid"])
    assert len(starts[killed["key"]]) == 2, starts  # the task killed mid-tune started again in another process

    with _store(settings, remote) as store:
        for e in tuned.values():
            art = store.get(e["key"])
            assert art is not None and art.meta["measure"] == "cost-model" and art.meta["tuned"] is False
            assert "cost model" in art.meta["tune_decision"]
        leases = leases_for(store.tiers[0].backend)
        assert all(leases.current(e["key"]) is None for e in result["entries"])  # every lease given back
    print(f"first run: {seconds:.1f} s, 6 entries, one node killed")

    # A second run resumes: the five stored entries are found (not tuned again); the failed one is leased by
    # another prewarm, so this run waits, then takes the expired lease over and tunes it. The other prewarm holds
    # the lease until this run is seen waiting on it, then renews it one last time, for 3 s, and stops (it died):
    # a lease of a fixed 8 s from here expired before the run got to the entry when the machine was busy (its
    # start-up took longer), and the run then never waited.
    key = by_entry[FAULT]["key"]
    leases = leases_for(backend_for_url(remote))
    other = leases.acquire(key, "another-prewarm", 60.0, owner={"host": "elsewhere"})
    assert other.ok and other.held is not None
    held = [other.held]
    states: set[str] = set()

    def note(entries: Any) -> None:
        states.update(e.state for e in entries if e.key == key)
        if "waiting" in states and held[0] is other.held:
            last = leases.renew(other.held, 3.0)
            assert last is not None, "the other prewarm's lease was taken over while it held it"
            held[0] = last

    second = time.time()
    again = prewarm_ray(settings, address=ray_cluster.address, remote=remote, backend="model", lease_seconds=20,
                        tuner=stand_in.RecordingModelTuner(log), ship=False, on_update=note)
    assert "waiting" in states
    assert again["failures"] == []
    assert {(e["kernel"], e["target"]): e["state"] for e in again["entries"]} == {
        **{k: "found" for k in tuned}, FAULT: "tuned"}
    ev = stand_in.events(log)
    assert len([x for x in ev if x["event"] == "finish" and x["key"] == key]) == 1
    (start,) = [x for x in ev if x["event"] == "start" and x["key"] == key and x["time"] > second]
    assert held[0] is not other.held and start["time"] >= held[0].expires  # never tuned while it was held
    for e in tuned.values():  # not tuned again
        assert len([x for x in ev if x["event"] == "finish" and x["key"] == e["key"]]) == 1
    assert key in _stored_records(dav_server.root, prefix)


def _store(settings: Any, remote: str) -> Any:
    from kbuild.build.prewarm import with_remote

    return shared_store(with_remote(settings, remote))


def test_cli_json_summary_and_a_target_no_node_offers(settings, dav_server, ray_cluster, capsys) -> None:
    remote = f"{dav_server.url}/t-{uuid.uuid4().hex[:8]}"
    cfg = str(settings.config_file)
    code = main(["prewarm", "--config", cfg, "--ray", ray_cluster.address, "--backend", "model", "--remote", remote,
                 "--kernel", "softmax", "--targets", "sm_90,sm_89", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 1 and "1 of 2 entries failed" in err
    assert doc["engine"] == "ray" and doc["backend"] == "model"
    assert doc["notes"] == []  # no recordings: nothing left out
    states = {e["target"]: e["state"] for e in doc["entries"]}
    assert states == {"sm_90": "tuned", "sm_89": "failed"}
    (failure,) = doc["failures"]
    assert "kbuild_sm_89" in failure["error"]
    assert doc["counts"]["sm_90"] == {"total": 1, "done": 1, "running": 0, "failed": 0, "waiting": 0,
                                      "shards_done": 0, "shards_running": 0, "shards_failed": 0}


@pytest.mark.hostile(fault="Ray output on stdout", outcome="clean error")
def test_cli_json_stdout_is_one_document_when_workers_die(settings, dav_server, ray_cluster, capsys,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray prints the raylet's reports on its own (``(raylet) A worker died or was killed...``), on stdout: with
    ``--json`` the output was then no JSON. While Ray runs, kbuild sends what Ray prints to stderr."""
    from kbuild.prewarm import tasks

    monkeypatch.setattr(tasks, "compile_task", stand_in.dying_compile_task)
    remote = f"{dav_server.url}/t-{uuid.uuid4().hex[:8]}"
    code = main(["prewarm", "--config", str(settings.config_file), "--ray", ray_cluster.address, "--backend", "model",
                 "--remote", remote, "--kernel", "softmax", "--targets", "sm_90", "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and "1 of 1 entries failed" in err
    doc = json.loads(out)  # stdout is exactly one JSON document
    assert [e["state"] for e in doc["entries"]] == ["failed"]
    assert "A worker died" in err  # Ray's own report, on stderr


WORKLOAD = """
import sys
sys.path.insert(0, {example!r})
import torch
from kbx_jit import kernels
x = torch.randn(64, 1024).half()
out = torch.empty_like(x)
kernels.softmax[(64,)](out, x, x.stride(0), out.stride(0), 1024, BLOCK=1024, num_warps=1, num_stages=3)
"""


def test_a_recorded_kernel_is_prewarmed_on_the_cluster(dav_server, ray_cluster, tmp_path, capsys) -> None:
    """A project that declares nothing but a recording: the driver names and keys the recorded kernel as the build
    does, the nodes resolve it by that name from the shipped project's recording (a bench spec from the recorded
    call, the derived space pruned on the node) and tune it (the cost model: a labelled stand-in); ``--kernel``
    naming declared kernels says the recordings were left out."""
    import shutil
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[2] / "examples" / "jit-package"
    project = tmp_path / "proj"
    shutil.copytree(example / "kbx_jit", project / "kbx_jit", ignore=shutil.ignore_patterns("_kbuild", "__pycache__"))
    (tmp_path / "workload.py").write_text(WORKLOAD.format(example=str(project)))
    done = subprocess.run([sys.executable, "-m", "kbuild", "record", "--mode", "cpu", "--target", "sm_90", "--out",
                           str(project / "softmax.recording.json"), "--", sys.executable, str(tmp_path / "workload.py")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (project / "pyproject.toml").write_text(
        '[project]\nname = "kbx-jit"\nversion = "0.1.0"\n\n[tool.kbuild]\nship = "package-data"\n'
        'targets = ["sm_90"]\ntune = "auto"\nrecordings = ["softmax.recording.json"]\n'
        'budget = { evaluations = 80 }\n')
    remote = f"{dav_server.url}/t-{uuid.uuid4().hex[:8]}"
    code = main(["prewarm", "--config", str(project / "pyproject.toml"), "--ray", ray_cluster.address, "--backend",
                 "model", "--remote", remote, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    ((entry),) = doc["entries"]
    assert entry["kernel"].startswith("softmax_") and entry["target"] == "sm_90" and entry["state"] == "tuned", entry
    assert doc["notes"] == [] and doc["failures"] == []


def test_the_summary_names_the_recordings_a_kernel_filter_leaves_out(settings: Any) -> None:
    import dataclasses

    from kbuild.prewarm.ray_engine import notes

    recorded = dataclasses.replace(settings, recordings=["kbuild-recording.json"])
    assert notes(settings) == notes(recorded) == [] == notes(settings, ["softmax"])
    (line,) = notes(recorded, ["softmax"])
    assert "kbuild-recording.json" in line and "--kernel" in line
