"""The local diskcache tier: LRU bound, gc, on-disk damage, crashes and concurrent processes."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest
from store_helpers import make_artefact

from kbuild.cache.local import LocalBackend
from kbuild.cache.record import Artefact
from kbuild.cache.tier import Tier


def test_lru_eviction_keeps_recently_used_entries(tmp_path):
    backend = LocalBackend(tmp_path / "s", max_bytes=1_000_000)
    tier = Tier(backend)
    a, b, c, d = (make_artefact(n, size=300_000) for n in "abcd")
    for art in (a, b, c):
        tier.put(art)
    assert tier.get(a.key) == a  # a is now more recent than b
    tier.put(d)  # over the bound: the least recently used (b) goes
    assert [tier.get(x.key) is not None for x in (a, b, c, d)] == [True, False, True, True]
    assert backend.volume() < 1_000_000 + 300_000


def test_gc_evicts_to_bound_and_removes_dangling_and_orphan_data(tmp_path):
    backend = LocalBackend(tmp_path / "s", max_bytes=1 << 30)
    tier = Tier(backend)
    arts = [make_artefact(f"g{i}", size=100_000) for i in range(6)]
    for art in arts:
        tier.put(art)
    for art in arts[3:]:
        tier.get(art.key)  # the last three are the most recently used
    backend.put_blob("0" * 64, b"orphan")  # e.g. left by a writer killed before its record
    backend.delete_blob(arts[0].cubin_sha256)  # a dangling record
    report = backend.gc(max_bytes=400_000)
    assert report.orphan_blobs == 1
    assert report.dangling_records >= 1
    assert report.bytes_after <= 400_000
    assert [tier.get(a.key) is not None for a in arts[3:]] == [True, True, True]
    assert set(tier.keys()) == {a.key for a in arts if backend.has_blob(a.cubin_sha256)}
    assert not backend.has_blob("0" * 64)


def test_byte_flip_in_the_file_on_disk(tmp_path, caplog):
    backend = LocalBackend(tmp_path / "s")
    tier = Tier(backend)
    art = make_artefact("disk", size=200_000)  # large enough for diskcache to keep it in a file
    tier.put(art)
    files = [p for p in (tmp_path / "s" / "blobs").rglob("*.val")]
    assert len(files) == 1
    data = bytearray(files[0].read_bytes())
    assert bytes(data) == art.cubin
    data[len(data) // 2] ^= 0x80
    files[0].write_bytes(bytes(data))
    assert tier.get(art.key) is None
    assert "corrupt entry" in caplog.text
    assert tier.stats.tier(tier.name).corrupt == 1
    assert not files[0].exists() and not backend.has_record(art.key)  # evicted
    assert tier.verify() == (0, [])


# -- crash: a writer SIGKILLed during a put ------------------------------------------------------

def _writer_blocked_before_record(path: str, ready) -> None:
    backend = LocalBackend(path)
    tier = Tier(backend)

    def stall(key: str, data: bytes, replace: bytes | None = None) -> bool:
        ready.set()
        time.sleep(60)
        raise AssertionError("not killed")

    backend.put_record = stall  # type: ignore[method-assign]
    tier.put(make_artefact("crash", size=500_000))


def test_sigkill_between_blob_and_record_leaves_no_visible_entry(tmp_path):
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_writer_blocked_before_record, args=(str(tmp_path / "s"), ready))
    proc.start()
    assert ready.wait(20) and proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    backend = LocalBackend(tmp_path / "s")
    tier = Tier(backend)
    art = make_artefact("crash", size=500_000)
    assert backend.has_blob(art.cubin_sha256)  # the blob was written...
    assert not tier.contains(art.key) and tier.get(art.key) is None  # ...but no entry is visible
    assert list(tier.keys()) == []
    tier.put(art)  # the next put succeeds (the write lock died with the writer)
    assert tier.get(art.key) == art
    assert backend.gc().orphan_blobs == 0


def _writer_loop(path: str, seed: int) -> None:
    tier = Tier(LocalBackend(path))
    rng = random.Random(seed)
    i = 0
    while True:
        tier.put(make_artefact(f"loop-{seed}-{i}", size=rng.choice([1_000, 300_000, 2_000_000])))
        i += 1


@pytest.mark.slow
def test_sigkill_at_random_points_never_exposes_a_partial_entry(tmp_path):
    ctx = multiprocessing.get_context("fork")
    path = str(tmp_path / "s")
    LocalBackend(path).close()
    rng = random.Random(7)
    for round_ in range(4):
        proc = ctx.Process(target=_writer_loop, args=(path, round_))
        proc.start()
        time.sleep(rng.uniform(0.15, 0.4))
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        tier = Tier(LocalBackend(path))
        keys = list(tier.keys())
        assert keys, "the writer should have stored something"
        for key in keys:
            assert tier.get(key) is not None, f"visible entry {key} is incomplete after SIGKILL"
        assert tier.verify() == (len(keys), [])
        tier.close()


# -- concurrency: 8 processes --------------------------------------------------------------------

SHARED = [Artefact.create(key=make_artefact(f"shared{i}").key, cubin=make_artefact(f"shared{i}", size=50_000 * (i + 1)).cubin,
                          meta={"kernel": f"shared{i}", "target": "sm_90", "created_at": "2026-01-01T00:00:00Z"})
          for i in range(4)]


def _open_tier(kind: str, location: str) -> Tier:
    if kind == "http":
        from kbuild.cache.http import HttpBackend

        return Tier(HttpBackend(location))
    if kind == "redis":
        from kbuild.cache.redis_tier import RedisBackend

        return Tier(RedisBackend(location))
    return Tier(LocalBackend(location))


def _worker(kind: str, path: str, n: int, out) -> None:
    try:
        tier = _open_tier(kind, path)
        rng = random.Random(n)
        own = [make_artefact(f"own-{n}-{i}", size=rng.choice([500, 40_000, 250_000])) for i in range(6)]
        expected = {a.key: a for a in SHARED + own}
        for step in range(40):
            art = rng.choice(SHARED + own)
            if rng.random() < 0.5:
                tier.put(art)
            got = tier.get(rng.choice(list(expected)))
            if got is not None:
                want = expected[got.key]
                if got.cubin != want.cubin or got.cubin_sha256 != want.cubin_sha256:
                    out.put(f"worker {n} step {step}: wrong bytes for {got.key}")
                    return
        for art in own:
            tier.put(art)
            if tier.get(art.key) != art:
                out.put(f"worker {n}: own entry {art.key} not readable after put")
                return
        out.put("ok")
    except Exception as exc:  # report instead of dying silently
        out.put(f"worker {n}: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("kind", ["local", pytest.param("http", marks=pytest.mark.nginx),
                                  pytest.param("redis", marks=pytest.mark.redis)])
def test_eight_processes_put_and_get_same_and_different_keys(kind, tmp_path, request):
    ctx = multiprocessing.get_context("fork")
    if kind == "local":
        path = str(tmp_path / "s")
        LocalBackend(path).close()
    else:
        path = request.getfixturevalue("http_url" if kind == "http" else "redis_url")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(kind, path, n, out)) for n in range(8)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    assert results == ["ok"] * 8
    tier = _open_tier(kind, path)
    assert len(list(tier.keys())) == 4 + 8 * 6
    for key in tier.keys():
        assert tier.get(key) is not None
    assert tier.verify()[1] == []


def test_store_dir_layout(tmp_path):
    LocalBackend(tmp_path / "s").close()
    assert {p.name for p in Path(tmp_path / "s").iterdir()} >= {"blobs", "records"}
