"""The tiered store built from settings: order, backfill, read-only tiers, degradation, trust, bad input."""

from __future__ import annotations

import errno
import http.client
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from store_helpers import free_port, make_artefact, make_key

from kbuild.cache import Artefact, StoreFullError, StoreUsageError, TierUnavailableError, open_store
from kbuild.cache.local import LocalBackend
from kbuild.errors import StoreError, UsageError
from kbuild.settings.model import RemoteSettings
from kbuild.settings.sources import settings_from_table


def settings(store: Path, remotes: Sequence[tuple[str, bool]] = (), secret: str | None = None, max_bytes: int = 1 << 30):
    import dataclasses

    s = settings_from_table({"store": str(store), "store_max_bytes": max_bytes}, environ={})
    return dataclasses.replace(s, remotes=[RemoteSettings(url=u, writable=w) for u, w in remotes],
                               store_secret=secret)


def test_local_only_store_round_trip_and_stats_file(tmp_path):
    with open_store(settings(tmp_path / "s")) as store:
        art = make_artefact("a", compile_seconds=3.0, tune_seconds=40.0)
        assert store.get(art.key) is None
        store.put(art)
        assert store.get(art.key) == art
        assert store.contains(art.key)
        assert list(store.keys()) == [art.key]
        assert [e.key for e in store.entries()] == [art.key]
    stats = json.loads((tmp_path / "s" / "stats.json").read_text())
    assert stats["tiers"]["local"]["hits"] == 1 and stats["tiers"]["local"]["misses"] == 1
    assert stats["time_saved_seconds"] == pytest.approx(43.0)
    with open_store(settings(tmp_path / "s")) as store:
        store.get(art.key)
    stats = json.loads((tmp_path / "s" / "stats.json").read_text())
    assert stats["tiers"]["local"]["hits"] == 2  # accumulated across processes / sessions


@pytest.mark.nginx
@pytest.mark.redis
def test_hit_in_lower_tier_backfills_upper_writable_tiers(tmp_path, http_url, redis_url):
    art = make_artefact("backfill")
    with open_store(settings(tmp_path / "prewarm", [(redis_url, True)])) as prewarm:
        prewarm.put(art)  # lands in local + redis only
    with open_store(settings(tmp_path / "ci", [(http_url, True), (redis_url, False)])) as store:
        assert store.get(art.key) == art
        local, http_tier, redis_tier = store.tiers
        assert local.backend.has_record(art.key)
        assert http_tier.backend.has_record(art.key)
        assert store.stats.tier(redis_tier.name).hits == 1
        assert store.stats.tier(local.name).backfills == 1
        assert store.stats.tier(http_tier.name).backfills == 1
        assert store.get(art.key) == art
        assert store.stats.tier(local.name).hits == 1


@pytest.mark.nginx
def test_read_only_remote_is_read_but_never_written(tmp_path, http_url):
    writer_art = make_artefact("shared")
    with open_store(settings(tmp_path / "w", [(http_url, True)])) as w:
        w.put(writer_art)
    with open_store(settings(tmp_path / "r", [(http_url, False)])) as r:
        own = make_artefact("own")
        r.put(own)
        assert not r.tiers[1].backend.has_record(own.key)
        assert r.get(writer_art.key) == writer_art  # read from the remote, backfilled locally
        assert r.delete(writer_art.key) is True  # deletes the local copy only
        assert r.tiers[1].backend.has_record(writer_art.key)


def test_degradation_remote_on_closed_port_warns_and_local_serves(tmp_path, caplog):
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/cache"
    with open_store(settings(tmp_path / "s", [(url, True)]), timeout=1.0) as store:
        art = make_artefact("degrade")
        with caplog.at_level(logging.WARNING):
            store.put(art)  # local written, remote failure is a warning
            assert store.get(art.key) == art
            assert store.get(make_key("missing")) is None
        assert "unavailable" in caplog.text and f"127.0.0.1:{port}" in caplog.text
        assert caplog.text.count("is unavailable") == 1  # one warning; the tier is skipped afterwards
        assert store.stats.tier(url).errors == 1


@pytest.mark.redis
def test_degradation_redis_down(tmp_path, caplog):
    url = f"redis://127.0.0.1:{free_port()}/0"
    with open_store(settings(tmp_path / "s", [(url, False)]), timeout=1.0) as store:
        art = make_artefact("r")
        store.put(art)
        with caplog.at_level(logging.WARNING):
            assert store.get(make_key("nothing")) is None
        assert "unavailable" in caplog.text


def test_tune_require_implies_strict(tmp_path):
    import dataclasses

    url = f"http://127.0.0.1:{free_port()}"
    s = dataclasses.replace(settings(tmp_path / "s", [(url, False)]), tune="require")
    with open_store(s, timeout=1.0) as store, pytest.raises(TierUnavailableError):
        store.get(make_key("x"))


def test_strict_turns_remote_failure_into_an_error(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    with open_store(settings(tmp_path / "s", [(url, True)]), strict=True, timeout=1.0) as store:
        with pytest.raises(TierUnavailableError) as info:
            store.get(make_key("x"))
        assert info.value.exit_code == 4
        with pytest.raises(TierUnavailableError):
            store.put(make_artefact("x"))


@pytest.mark.nginx
def test_poisoned_http_record_rejected_with_secret(tmp_path, nginx_server, http_url, caplog):
    secret = "team-secret"
    good = make_artefact("good")
    with open_store(settings(tmp_path / "prewarm", [(http_url, True)], secret=secret)) as prewarm:
        prewarm.put(good)
    # An attacker with write access to the cache plants an entry for a key builds will ask for.
    evil = Artefact.create(key=make_key("victim"), cubin=b"\x7fELF evil code", meta={"target": "sm_90"})
    prefix = http_url.split(str(nginx_server.port), 1)[1]
    for path, body in ((f"/cas/{evil.cubin_sha256}", evil.cubin), (f"/ac/{evil.key}", evil.record(None))):
        conn = http.client.HTTPConnection("127.0.0.1", nginx_server.port)
        conn.request("PUT", prefix + path, body=body)
        assert conn.getresponse().status in (201, 204)
        conn.close()
    with open_store(settings(tmp_path / "ci", [(http_url, False)], secret=secret)) as ci:
        with caplog.at_level(logging.WARNING):
            assert ci.get(evil.key) is None
        assert "rejected" in caplog.text and "not signed" in caplog.text
        assert not ci.local.backend.has_record(evil.key)  # never backfilled
        assert ci.stats.tier(ci.tiers[1].name).rejected == 1
        assert ci.get(good.key) == good  # correctly signed records are accepted
    # also with a signature made with another secret
    with open_store(settings(tmp_path / "ci2", [(http_url, False)], secret="other")) as ci2:
        assert ci2.get(good.key) is None


def test_unknown_url_scheme_is_a_usage_error(tmp_path):
    with pytest.raises(StoreUsageError) as info:
        open_store(settings(tmp_path / "s", [("ftp://cache.example/x", False)]))
    assert info.value.exit_code == 2
    assert "ftp://" in str(info.value) and "remotes[0]" in str(info.value)
    assert not (tmp_path / "s").exists()  # nothing created


def test_store_directory_that_cannot_be_used(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for bad in (blocker, blocker / "sub"):
        with pytest.raises(StoreUsageError) as info:
            open_store(settings(bad))
        assert info.value.exit_code == 2 and str(bad) in str(info.value)
    assert blocker.read_text() == "not a directory"


def test_unreadable_store_directory(tmp_path, monkeypatch):
    d = tmp_path / "locked"
    d.mkdir()
    d.chmod(0)
    try:
        if os.geteuid() == 0:  # root ignores permissions: simulate what access(2) would say
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, m, *a, **k: False if Path(p) == d else real(p, m, *a, **k))
        with pytest.raises(StoreUsageError, match="not readable") as info:
            open_store(settings(d))
        assert isinstance(info.value, UsageError) and str(d) in str(info.value)
    finally:
        d.chmod(0o755)


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _check_full_disk(store, existing, big):
    with pytest.raises(StoreFullError) as info:  # `kbuild cache put`: storing is its whole job
        store.put(big, required=True)
    assert info.value.exit_code == 2 and "disk full" in str(info.value)
    assert store.get(big.key) is None and not store.contains(big.key)
    store.put(big)  # a build: nothing stored, a warning, and it goes on
    assert store.get(big.key) is None and not store.contains(big.key)
    assert store.get(existing.key) == existing  # the store is unchanged and still serves


def test_full_disk_on_a_tiny_tmpfs(tmp_path):
    mnt = tmp_path / "tiny"
    if not _tmpfs(mnt, "2m"):
        pytest.skip("cannot mount a tmpfs here (needs root); test_full_disk_simulated covers the logic")
    try:
        with open_store(settings(mnt / "s")) as store:
            existing = make_artefact("small", size=10_000)
            store.put(existing)
            big = make_artefact("huge", size=4 * 2**20)
            _check_full_disk(store, existing, big)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_simulated(tmp_path, monkeypatch):
    with open_store(settings(tmp_path / "s")) as store:
        existing = make_artefact("small", size=100_000)
        store.put(existing)
        backend = store.local.backend
        assert isinstance(backend, LocalBackend)

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(backend._blobs._disk, "store", full)
        _check_full_disk(store, existing, make_artefact("big", size=100_000))


def test_tiered_store_errors_are_store_errors(tmp_path):
    with open_store(settings(tmp_path / "s")) as store:
        store.local.writable = False
        with pytest.raises(StoreError, match="no writable store tier"):
            store.put(make_artefact("x"))


def test_remote_that_accepts_but_never_answers_times_out_into_a_warning(tmp_path, caplog):
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections are queued by the kernel but never answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/c"
        art = make_artefact("t")
        with open_store(settings(tmp_path / "s", [(url, False)]), timeout=0.3) as store:
            store.put(art)
            with caplog.at_level(logging.WARNING):
                assert store.get(make_key("other")) is None
                assert store.get(art.key) == art
            assert "timed out" in caplog.text


def test_secret_signs_new_records_and_unsigned_local_entries_are_replaced(tmp_path):
    old = make_artefact("old")
    with open_store(settings(tmp_path / "s")) as store:
        store.put(old)
    with open_store(settings(tmp_path / "s", secret="k")) as store:
        assert store.get(old.key) is None  # written before the secret: no proof of where it came from
        store.put(old)  # the rebuild replaces the unsigned record with a signed one
        assert store.get(old.key) == old
        new = make_artefact("new")
        store.put(new)
        raw = store.local.backend.get_record(new.key)
        assert raw is not None
        record = json.loads(raw)
        assert record["signature"].startswith("hmac-sha256:")
        _, problems = store.local.verify(secret="k")
        assert problems == []
        _, problems = store.local.verify(secret="wrong")
        assert sorted(p.key for p in problems) == sorted([new.key, old.key])


def test_metadata_must_be_json(tmp_path):
    with pytest.raises(StoreUsageError, match="not JSON"):
        Artefact.create(key=make_key("m"), cubin=b"x", meta={"speedup": float("nan")})
    with pytest.raises(StoreUsageError, match="not JSON"):
        Artefact.create(key=make_key("m"), cubin=b"x", meta={"when": object()})
    a = Artefact.create(key=make_key("m"), cubin=b"x", meta={"t": (1, 2)})
    assert a.meta["t"] == [1, 2]  # normalised through JSON, so it equals what any tier returns


def test_remote_errors_name_the_configured_url_without_credentials(tmp_path):
    from kbuild.cache.url import redact_url

    port = free_port()
    url = f"http://builder:hunter2@127.0.0.1:{port}/cache/"
    with open_store(settings(tmp_path / "s", [(url, False)]), strict=True, timeout=1.0) as store:
        assert store.tiers[1].name == redact_url(url) == f"http://127.0.0.1:{port}/cache/"
        with pytest.raises(TierUnavailableError) as info:
            store.get(make_key("x"))
    assert redact_url(url) in str(info.value) and "hunter2" not in str(info.value)
