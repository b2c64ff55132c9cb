"""Leases in a shared tier (kbuild.cache.lease) against real servers: nginx WebDAV (MOVE) and redis-server.

One holder at a time; the same holder (a retried task of the same run) takes its own lease again; an expired
lease is taken over by exactly one of many racing runs; a stale holder can neither renew nor release a lease
that was taken over; a server without MOVE is a clear error."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from kbuild.cache import backend_for_url
from kbuild.cache.lease import LeaseRecord, LeaseUnsupported, leases_for


def _key() -> str:
    return uuid.uuid4().hex * 2


@pytest.fixture(params=[pytest.param("http", marks=pytest.mark.nginx), pytest.param("redis", marks=pytest.mark.redis)])
def leases(request: pytest.FixtureRequest) -> Iterator[object]:
    if request.param == "http":
        url = f"{request.getfixturevalue('dav_server').url}/t-{uuid.uuid4().hex[:8]}"
    else:
        url = f"{request.getfixturevalue('redis_server').url}?prefix=t{uuid.uuid4().hex[:8]}"
    backend = backend_for_url(url)
    yield leases_for(backend)
    backend.close()


def test_one_holder_at_a_time_and_the_same_run_takes_its_own_again(leases) -> None:
    key = _key()
    a = leases.acquire(key, "run-a", 30, owner={"host": "a"})
    assert a.ok and a.held is not None and a.held.holder == "run-a"
    b = leases.acquire(key, "run-b", 30)
    assert not b.ok and b.held is not None and b.held.holder == "run-a" and b.held.owner == {"host": "a"}
    again = leases.acquire(key, "run-a", 30, owner={"host": "a2"})  # a retried task of run-a, on another node
    assert again.ok and again.held is not None and again.held.owner == {"host": "a2"}
    assert leases.current(key).holder == "run-a"
    assert leases.release(again.held)
    assert leases.current(key) is None
    b = leases.acquire(key, "run-b", 30)
    assert b.ok and leases.current(key).holder == "run-b"


def test_an_expired_lease_is_taken_over_and_its_old_holder_loses_it(leases) -> None:
    key = _key()
    a = leases.acquire(key, "run-a", 0.3)
    assert a.ok
    time.sleep(0.5)
    b = leases.acquire(key, "run-b", 30)
    assert b.ok and leases.current(key).holder == "run-b"
    assert leases.renew(a.held, 30) is None  # a stale holder cannot renew...
    assert not leases.release(a.held)  # ...nor remove the new holder's lease
    assert leases.current(key).holder == "run-b"
    renewed = leases.renew(b.held, 60)
    assert renewed is not None and renewed.expires > b.held.expires


def test_racing_runs_take_an_expired_lease_over_exactly_once(leases) -> None:
    key = _key()
    assert leases.acquire(key, "dead-run", 0.2).ok
    time.sleep(0.4)
    winners: list[str] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        if leases.acquire(key, f"run-{i}", 30).ok:
            winners.append(f"run-{i}")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1, winners
    assert leases.current(key).holder == winners[0]


def test_a_damaged_lease_record_counts_as_expired() -> None:
    assert LeaseRecord.from_bytes(b"not json", "k") is None
    rec = LeaseRecord(key="k", holder="h", token="t", expires=time.time() + 5, owner={})
    assert LeaseRecord.from_bytes(rec.to_bytes(), "k") == rec
    assert LeaseRecord.from_bytes(rec.to_bytes(), "other-key") is None


@pytest.mark.nginx
def test_a_server_without_move_cannot_hold_leases(plain_dav_server) -> None:
    backend = backend_for_url(f"{plain_dav_server.url}/t-{uuid.uuid4().hex[:8]}")
    with pytest.raises(LeaseUnsupported, match="MOVE") as info:
        leases_for(backend).acquire(_key(), "run", 30)
    assert info.value.exit_code == 2


def test_the_local_tier_has_no_leases(tmp_path) -> None:
    from kbuild.cache.local import LocalBackend

    with pytest.raises(LeaseUnsupported, match="cannot hold leases"):
        leases_for(LocalBackend(tmp_path / "s", max_bytes=1 << 20))
