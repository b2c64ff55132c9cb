"""The store against hostile servers, entries, disks and input (issue 13): each case is marked with
its fault class and the promised outcome, and runs against real servers on loopback."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hostile_helpers import assert_clean_error
from store_helpers import drip_server, make_artefact, make_key

from kbuild.cache import TierUnavailableError, open_store
from kbuild.settings.model import RemoteSettings
from kbuild.settings.sources import settings_from_table

hostile = pytest.mark.hostile


def settings(store: Path, remotes: Sequence[tuple[str, bool]] = (), secret: str | None = None, **table: object):
    s = settings_from_table({"store": str(store), **table}, environ={})
    return dataclasses.replace(s, remotes=[RemoteSettings(url=u, writable=w) for u, w in remotes],
                               store_secret=secret)


def kbuild(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command line, in a child process (its own environment, exit status and stderr)."""
    full = dict(os.environ)  # no KBUILD_* setting but those a test sets (conftest.py)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "kbuild", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def pyproject(tmp_path: Path, remotes: list[str], *, writable: bool = False) -> Path:
    lines = ["[tool.kbuild]", f'store = "{tmp_path / "store"}"']
    for url in remotes:
        lines += ["[[tool.kbuild.remotes]]", f'url = "{url}"', f"writable = {'true' if writable else 'false'}"]
    path = tmp_path / "pyproject.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------------------------
# Item 2: a remote that drips its answer is cut off at the total deadline.

DEADLINE = 1.5
SLACK = 3.0  # "deadline + a few seconds": process start-up and the warning; the drip itself lasts 30 s


@hostile(fault="slow remote", outcome="degraded with warning")
@pytest.mark.parametrize("kind", ["http", pytest.param("redis", marks=pytest.mark.redis)])
def test_dripping_remote_is_a_warning_and_a_miss_within_the_deadline(tmp_path, caplog, kind):
    art = make_artefact("drip")
    with drip_server(kind) as srv:
        with open_store(settings(tmp_path / "s", [(srv.url, False)], remote_deadline=DEADLINE)) as store:
            started = time.monotonic()
            with caplog.at_level(logging.WARNING):
                assert store.get(art.key) is None
            elapsed = time.monotonic() - started
            assert elapsed < DEADLINE + SLACK, f"the get took {elapsed:.1f} s"
            assert "deadline" in caplog.text and "unavailable" in caplog.text
            assert srv.requests, "the drip server was never asked"
            # the tier is down for the rest of the run: the next lookup does not wait again
            started = time.monotonic()
            assert store.get(make_key("other")) is None
            assert time.monotonic() - started < 0.5


@hostile(fault="slow remote", outcome="clean error")
@pytest.mark.parametrize("kind", ["http", pytest.param("redis", marks=pytest.mark.redis)])
def test_dripping_remote_under_strict_fails_within_the_deadline(tmp_path, kind):
    with drip_server(kind) as srv:
        with open_store(settings(tmp_path / "s", [(srv.url, False)], remote_deadline=DEADLINE), strict=True) as store:
            started = time.monotonic()
            with pytest.raises(TierUnavailableError, match="deadline") as info:
                store.get(make_key("x"))
            assert time.monotonic() - started < DEADLINE + SLACK
            assert info.value.exit_code == 4


@hostile(fault="slow remote", outcome="clean error")
def test_cli_strict_get_from_a_dripping_remote_exits_4_within_the_deadline(tmp_path):
    with drip_server("http") as srv:
        config = pyproject(tmp_path, [srv.url])
        started = time.monotonic()
        proc = kbuild("cache", "get", "--config", str(config), "--strict", "--json", make_key("x"), cwd=tmp_path,
                      env={"KBUILD_REMOTE_DEADLINE": str(DEADLINE)})
        elapsed = time.monotonic() - started
    assert_clean_error(proc.returncode, proc.stderr, names=[srv.url, "KBUILD_REMOTE_DEADLINE"], exit_code=4)
    assert elapsed < DEADLINE + SLACK + 2.0, f"kbuild cache get took {elapsed:.1f} s"  # + interpreter start-up


@hostile(fault="slow remote", outcome="degraded with warning")
def test_cli_get_from_a_dripping_remote_warns_and_misses_within_the_deadline(tmp_path):
    with drip_server("http") as srv:
        config = pyproject(tmp_path, [srv.url])
        started = time.monotonic()
        proc = kbuild("cache", "get", "--config", str(config), "--json", make_key("x"), cwd=tmp_path,
                      env={"KBUILD_REMOTE_DEADLINE": str(DEADLINE)})
        elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr  # a miss
    assert "deadline" in proc.stderr and "Traceback" not in proc.stderr
    assert elapsed < DEADLINE + SLACK + 2.0, f"kbuild cache get took {elapsed:.1f} s"


def test_remote_deadline_setting_is_checked_where_it_is_read(tmp_path):
    from kbuild.errors import ConfigError

    with pytest.raises(ConfigError, match="remote_deadline"):
        settings_from_table({"remote_deadline": 0}, environ={})
    with pytest.raises(ConfigError, match="KBUILD_REMOTE_DEADLINE"):
        settings_from_table({}, environ={"KBUILD_REMOTE_DEADLINE": "-1"})
    assert settings_from_table({}, environ={}).remote_deadline == 30.0


# ----------------------------------------------------------------------------------------------
# Item 4: signing is never turned off without a word.

@hostile(fault="empty secret", outcome="clean error")
@pytest.mark.parametrize("value", ["", "   "])
def test_empty_store_secret_is_an_error_naming_the_variable(tmp_path, value):
    from kbuild.errors import ConfigError

    with pytest.raises(ConfigError, match=r"KBUILD_STORE_SECRET.*empty"):
        settings_from_table({}, environ={"KBUILD_STORE_SECRET": value})
    proc = kbuild("cache", "ls", "--store", str(tmp_path / "store"), cwd=tmp_path, env={"KBUILD_STORE_SECRET": value})
    assert_clean_error(proc.returncode, proc.stderr, names=["KBUILD_STORE_SECRET"])
    assert not (tmp_path / "store").exists()  # nothing written


@pytest.mark.nginx
def test_remotes_without_a_secret_warn_once_that_records_are_not_authenticated(tmp_path, http_url, caplog):
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            with open_store(settings(tmp_path / "s", [(http_url, False)])) as store:
                store.get(make_key("x"))
    assert caplog.text.count("not authenticated") == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        with open_store(settings(tmp_path / "s", [(http_url + "/other", False)], secret="k")) as store:
            store.get(make_key("x"))
        with open_store(settings(tmp_path / "s")) as store:  # no remote: nothing to authenticate
            store.get(make_key("x"))
    assert "not authenticated" not in caplog.text


@pytest.mark.nginx
def test_cli_with_a_remote_and_no_secret_prints_one_warning(tmp_path, http_url):
    config = pyproject(tmp_path, [http_url])
    proc = kbuild("cache", "get", "--config", str(config), "--json", make_key("x"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("not authenticated") == 1, proc.stderr
    proc = kbuild("cache", "get", "--config", str(config), "--json", make_key("x"), cwd=tmp_path,
                  env={"KBUILD_STORE_SECRET": "k"})
    assert proc.returncode == 1 and "not authenticated" not in proc.stderr, proc.stderr


# ----------------------------------------------------------------------------------------------
# Item 3: a poisoned entry backfilled before signing was turned on is not shipped afterwards.

def _poison(put, key: str, fake: bytes) -> None:
    """An attacker with write access to the remote plants an unsigned record for ``key`` and its fake cubin."""
    from kbuild.cache.record import Artefact

    art = Artefact.create(key=key, cubin=fake, meta={"kernel": "k", "target": "sm_90"})
    put(f"/cas/{art.cubin_sha256}", art.cubin)
    put(f"/ac/{key}", art.record(None))


def _raw_put(server, prefix: str):
    import http.client

    def put(path: str, data: bytes) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("PUT", prefix + path, body=data)
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.status in (200, 201, 204), resp.status

    return put


@pytest.mark.nginx
@hostile(fault="poisoned entry", outcome="served correct bytes")
def test_entry_backfilled_from_a_poisoned_remote_is_rejected_once_a_secret_is_set(tmp_path, nginx_server, caplog):
    import json

    from kbuild.cache import open_store as open_

    url = f"{nginx_server.url}/poisoned-{make_key(str(tmp_path))[:8]}"
    good = make_artefact("victim")
    fake = b"\x7fELF" + b"\xcc" * 996  # the attacker's cubin
    _poison(_raw_put(nginx_server, url[len(nginx_server.url):]), good.key, fake)

    # 1. No secret yet: the poisoned entry is served (nothing can tell) and backfilled into the local tier.
    with open_(settings(tmp_path / "s", [(url, False)])) as store:
        served = store.get(good.key)
        assert served is not None and served.cubin == fake
        assert store.local.backend.has_record(good.key)

    # 2. The secret is set: neither the local copy nor the remote one is shipped.
    with caplog.at_level(logging.WARNING):
        with open_(settings(tmp_path / "s", [(url, False)], secret="k")) as store:
            assert store.get(good.key) is None
    assert "local: rejected entry" in caplog.text and "not signed" in caplog.text

    # 3. `kbuild cache verify` reports the unsigned local record; --fix evicts it.
    env = {"KBUILD_STORE_SECRET": "k"}
    proc = kbuild("cache", "verify", "--store", str(tmp_path / "s"), "--json", cwd=tmp_path, env=env)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["ok"] is False, proc.stderr
    assert [(p["tier"], p["key"], p["problem"]) for p in doc["problems"]] == [("local", good.key, "record is not signed")]
    proc = kbuild("cache", "verify", "--store", str(tmp_path / "s"), "--fix", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout)["problems"][0]["fixed"] is True, proc.stderr
    proc = kbuild("cache", "verify", "--store", str(tmp_path / "s"), "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"checked": 0, "ok": True, "problems": [],
                                                               "file_warnings": 0}, proc.stdout

    # 4. The legitimate build stores the real cubin, signed; that is what is served from then on.
    with open_(settings(tmp_path / "s", [(url, True)], secret="k")) as store:
        assert store.get(good.key) is None
        store.put(good)
    with open_(settings(tmp_path / "fresh", [(url, False)], secret="k")) as store:
        assert store.get(good.key) == good  # the remote's planted record was replaced too


# ----------------------------------------------------------------------------------------------
# Item 5: a record planted first does not keep the signed writer's record out.

@pytest.mark.parametrize("case", [
    pytest.param("local", marks=hostile(fault="planted record", outcome="served correct bytes")),
    pytest.param("http", marks=[pytest.mark.nginx, hostile(fault="planted record", outcome="served correct bytes")]),
    pytest.param("redis", marks=[pytest.mark.redis, hostile(fault="planted redis record", outcome="served correct bytes")]),
], indirect=True)
@pytest.mark.parametrize("planted_with", [None, "another secret", "garbage"])
def test_signed_writer_replaces_a_record_planted_first(case, planted_with):
    from kbuild.cache.record import Artefact

    secret = "s3cret"
    good = make_artefact("planted-first")
    evil = Artefact.create(key=good.key, cubin=b"\x7fELF evil", meta={"kernel": "evil"})
    case.corrupt_blob(evil.cubin_sha256, evil.cubin)
    case.plant_record(good.key, b"{not json" if planted_with == "garbage" else evil.record(planted_with))
    tier = case.tier(secret=secret)
    assert tier.get(good.key) is None
    tier.put(good)
    assert tier.get(good.key) == good
    assert json_of(case.backend.get_record(good.key))["signature"].startswith("hmac-sha256:")


def json_of(raw: bytes | None) -> dict:
    import json

    assert raw is not None
    return json.loads(raw)


@pytest.mark.parametrize("case", ["local", pytest.param("redis", marks=pytest.mark.redis)], indirect=True)
def test_compare_and_set_never_overwrites_a_record_stored_in_between(case):
    good, other = make_artefact("cas-a"), make_artefact("cas-b")
    first = good.record("k")
    assert case.backend.put_record(good.key, first)
    # a writer that read some other (invalid) bytes must not overwrite the valid record stored since
    assert case.backend.put_record(good.key, other.record("k"), replace=b"what the writer saw") is False
    assert case.backend.get_record(good.key) == first
    assert case.backend.put_record(good.key, other.record("k"), replace=first) is True


# ----------------------------------------------------------------------------------------------
# Item 7: nothing a tier or a bundle claims is read whole into memory.

@contextlib.contextmanager
def peak_memory() -> Iterator[list[int]]:
    """The peak of Python allocations inside the block (tracemalloc), in bytes, as ``box[0]``."""
    import tracemalloc

    box = [0]
    tracemalloc.start()
    try:
        yield box
    finally:
        box[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


BLOAT = 64 << 20  # what the hostile server offers; the caps allow 1 MiB (records)


@hostile(fault="oversized record", outcome="degraded with warning")
@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_http_record_over_the_cap_is_refused_without_reading_it(tmp_path, caplog, chunked):
    from kbuild.cache.http import HttpBackend
    from kbuild.cache.tier import Tier

    with drip_server("bloat", count=BLOAT, interval=-1 if chunked else 0) as srv:
        tier = Tier(HttpBackend(srv.url), writable=False)
        with caplog.at_level(logging.WARNING), peak_memory() as peak:
            assert tier.get(make_key("huge")) is None
        tier.close()
    assert "over the" in caplog.text and "cap" in caplog.text
    assert peak[0] < 8 << 20, f"reading the record peaked at {peak[0] >> 20} MiB"
    assert srv.sent < BLOAT // 2, f"the client took {srv.sent >> 20} MiB of the {BLOAT >> 20} MiB offered"


@pytest.mark.nginx
@hostile(fault="oversized cubin", outcome="degraded with warning")
def test_http_cubin_over_the_cap_is_a_miss(tmp_path, nginx_server, caplog):
    from kbuild.cache.http import HttpBackend
    from kbuild.cache.tier import Tier

    url = f"{nginx_server.url}/big-{make_key(str(tmp_path))[:8]}"
    art = make_artefact("big-cubin")
    backend = HttpBackend(url)
    tier = Tier(backend)
    tier.put(art)
    (nginx_server.root / url.rsplit("/", 1)[1] / "cas" / art.cubin_sha256).write_bytes(b"\0" * (3 << 20))
    backend.max_blob_bytes = 1 << 20  # the 256 MiB production cap, scaled down: same code path
    with caplog.at_level(logging.WARNING), peak_memory() as peak:
        assert tier.get(art.key) is None
    assert f"over the {art.size}-byte cap" in caplog.text  # the size its record states is the smaller cap
    assert peak[0] < 2 << 20


@pytest.mark.redis
@hostile(fault="oversized record", outcome="degraded with warning")
def test_redis_record_over_the_cap_is_refused_without_reading_it(redis_url, caplog):
    from kbuild.cache.redis_tier import RedisBackend
    from kbuild.cache.tier import Tier

    backend = RedisBackend(redis_url)
    key = make_key("huge-redis")
    backend.client.set(backend._ac(key), b"{" * (16 << 20))
    tier = Tier(backend)
    with caplog.at_level(logging.WARNING), peak_memory() as peak:
        assert tier.get(key) is None
    assert "over the 1048576-byte cap" in caplog.text
    assert peak[0] < 8 << 20, f"reading the record peaked at {peak[0] >> 20} MiB"
    assert not backend.has_record(key)  # a writable tier drops the oversized record, like any corrupt one
    backend.close()


def test_artefacts_over_the_caps_are_refused_when_made(monkeypatch):
    from kbuild.cache import record as record_mod
    from kbuild.cache.record import Artefact
    from kbuild.errors import StoreUsageError

    with pytest.raises(StoreUsageError, match="record holds at most"):
        Artefact.create(key=make_key("m"), cubin=b"x", meta={"blob": "x" * (1 << 20)})
    monkeypatch.setattr(record_mod, "MAX_BLOB_BYTES", 1000)
    with pytest.raises(StoreUsageError, match="cap of the store"):
        Artefact.create(key=make_key("m"), cubin=b"\0" * 1001, meta={})


class _Zeros(io.RawIOBase):
    """An endless stream of zero bytes that allocates nothing but the caller's buffer."""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        b[:] = bytes(len(b))
        return len(b)


def _bomb(path: Path, members: int, size: int) -> None:
    """A .tar.gz of a manifest and ``members`` cubins of ``size`` zero bytes each, named after other bytes:
    a few hundred KiB on disk."""
    import gzip
    import json
    import tarfile

    manifest = json.dumps({"format": "kbuild-bundle/1", "keys": []}).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("kbuild-bundle.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for i in range(members):
            info = tarfile.TarInfo(f"cas/{make_key(f'bomb{i}')}")
            info.size = size
            tar.addfile(info, io.BufferedReader(_Zeros()))


@hostile(fault="bundle bomb", outcome="clean error")
def test_bundle_bomb_over_the_store_bound_is_refused_before_extracting(tmp_path, monkeypatch, kbuild_env):
    bomb = tmp_path / "bomb.tar.gz"
    _bomb(bomb, 3, 40 << 20)  # 120 MiB inside
    assert bomb.stat().st_size < 1 << 20
    store = tmp_path / "store"
    kbuild_env.set(store_max_bytes=64 << 20)
    monkeypatch.chdir(tmp_path)
    with peak_memory() as peak:
        code, _out, err = run_cache(["import", "--store", str(store), str(bomb)])
    assert_clean_error(code, err, names=[str(bomb), "uncompressed"])
    assert peak[0] < 16 << 20, f"the import peaked at {peak[0] >> 20} MiB"
    assert stored(store) == ([], 0)


@hostile(fault="bundle bomb", outcome="clean error")
def test_bundle_under_the_bound_is_verified_streaming(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.tar.gz"
    _bomb(bomb, 3, 40 << 20)
    store = tmp_path / "store"
    monkeypatch.chdir(tmp_path)
    with peak_memory() as peak:
        code, _out, err = run_cache(["import", "--store", str(store), str(bomb)])
    assert_clean_error(code, err, names=[str(bomb), "sha256"])
    assert peak[0] < 16 << 20, f"the import peaked at {peak[0] >> 20} MiB"
    assert stored(store) == ([], 0)


@hostile(fault="bundle bomb", outcome="clean error")
def test_bundle_member_over_its_cap_is_refused(tmp_path):
    import tarfile

    from kbuild.cache.bundle import import_bundle
    from kbuild.cache.local import LocalBackend
    from kbuild.cache.tier import Tier
    from kbuild.errors import BundleError

    path = tmp_path / "big-record.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(f"ac/{make_key('r')}")
        info.size = (1 << 20) + 1
        tar.addfile(info, io.BufferedReader(_Zeros()))
    with pytest.raises(BundleError, match="over the 1048576-byte cap for a record"):
        import_bundle(Tier(LocalBackend(tmp_path / "s")), path)


def stored(path: Path) -> tuple[list[str], int]:
    """The keys of the local store at ``path`` and its number of cubins."""
    from kbuild.cache.local import LocalBackend

    backend = LocalBackend(path)
    try:
        return sorted(backend.record_keys()), backend.blob_count()
    finally:
        backend.close()


def run_cache(argv: list[str]) -> tuple[int, str, str]:
    """``kbuild cache ...`` in this process (for memory measurements): status, stdout, and the error line."""
    import argparse
    import contextlib as cl
    import io as io_

    from kbuild.cache import cli as cache_cli
    from kbuild.errors import KBuildError

    parser = argparse.ArgumentParser(prog="kbuild")
    cache_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["cache", *argv])
    out, err = io_.StringIO(), io_.StringIO()
    with cl.redirect_stdout(out), cl.redirect_stderr(err):
        try:
            code = int(args.func(args) or 0)
        except KBuildError as exc:
            code = exc.exit_code
            print(f"error: {exc}", file=err)
    return code, out.getvalue(), err.getvalue()


# ----------------------------------------------------------------------------------------------
# Item 6: a full disk, killed writers and a read-only store.

def _fill(store: Path, size: int = 150_000) -> list:
    """Put cubins into the store at ``store`` until the disk is full; the artefacts that made it. The put
    that failed must leave no file behind."""
    from kbuild.cache.local import LocalBackend
    from kbuild.cache.tier import Tier
    from kbuild.errors import StoreFullError

    backend = LocalBackend(store)
    tier = Tier(backend)
    stored = []
    with pytest.raises(StoreFullError):
        for i in range(100):
            art = make_artefact(f"fill{i}", size=size)
            tier.put(art)
            stored.append(art)
    assert sum(1 for _ in (store / "blobs").rglob("*.val")) == len(stored)  # the failed put removed its file
    assert backend.blob_count() == len(stored)  # and left no orphan cubin
    backend.close()
    filler = store.parent / "filler"
    with contextlib.suppress(OSError), open(filler, "ab") as f:  # whatever room is left
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return stored


@pytest.fixture
def full_store(tmpfs) -> tuple[Path, list]:
    disk = tmpfs("disk", "2m")
    store = disk / "store"
    stored = _fill(store)
    assert len(stored) >= 3 and os.statvfs(disk).f_bavail == 0
    return store, stored


@hostile(fault="full disk", outcome="served correct bytes")
@pytest.mark.parametrize("verb", ["get", "ls", "stats", "verify"])
def test_full_disk_still_serves_reads(tmp_path, full_store, verb):
    import json

    store, stored = full_store
    args = {"get": ["get", stored[0].key, "-o", str(tmp_path / "out.cubin")], "ls": ["ls"], "stats": ["stats"],
            "verify": ["verify"]}[verb]
    proc = kbuild("cache", *args, "--store", str(store), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    if verb == "get":
        assert (tmp_path / "out.cubin").read_bytes() == stored[0].cubin
    elif verb == "ls":
        assert {e["key"] for e in doc["entries"]} == {a.key for a in stored}
    elif verb == "stats":
        assert doc["entries"] == len(stored)
    else:
        assert doc["ok"] is True and doc["checked"] == len(stored)


@hostile(fault="full disk", outcome="clean error")
def test_full_disk_put_is_a_clean_error_that_leaves_nothing(tmp_path, full_store):
    store, stored = full_store
    art = make_artefact("one-more", size=150_000)
    (tmp_path / "c").write_bytes(art.cubin)
    proc = kbuild("cache", "put", "--store", str(store), "--key", art.key, "--cubin", str(tmp_path / "c"), cwd=tmp_path)
    assert_clean_error(proc.returncode, proc.stderr, names=[str(store), "full ("])
    assert stored_files(store) == (len(stored), len(stored))


@hostile(fault="full disk", outcome="degraded with warning")
def test_full_disk_cleanup_works_and_frees_room(tmp_path, full_store):
    import json

    store, stored = full_store
    proc = kbuild("cache", "gc", "--store", str(store), "--json", cwd=tmp_path)  # nothing to free: says so
    assert proc.returncode == 0 and "still full" in proc.stderr, proc.stderr
    proc = kbuild("cache", "verify", "--store", str(store), "--fix", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"] is True, proc.stderr
    proc = kbuild("cache", "gc", "--store", str(store), "--max-bytes", "400000", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["bytes_after"] <= 400_000 + 200_000 and doc["entries"] < len(stored)
    art = make_artefact("after-gc", size=150_000)
    (tmp_path / "c").write_bytes(art.cubin)
    proc = kbuild("cache", "put", "--store", str(store), "--key", art.key, "--cubin", str(tmp_path / "c"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = kbuild("cache", "verify", "--store", str(store), "--json", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["ok"] is True and doc["file_warnings"] == 0, proc.stdout


@hostile(fault="full disk", outcome="clean error")
def test_put_whose_record_fails_removes_its_new_cubin(tmp_path, monkeypatch):
    from kbuild.cache.local import LocalBackend
    from kbuild.cache.tier import Tier
    from kbuild.errors import StoreFullError

    backend = LocalBackend(tmp_path / "s")
    tier = Tier(backend)
    shared = make_artefact("shared", size=100_000)  # a value file, not a row of the database
    tier.put(shared)

    def full(*args, **kwargs):
        raise StoreFullError("writing record: disk full")

    monkeypatch.setattr(backend, "put_record", full)
    art = make_artefact("orphan", size=100_000)
    with pytest.raises(StoreFullError):
        tier.put(art)
    assert not backend.has_blob(art.cubin_sha256)  # the new cubin went with the failed put
    from kbuild.cache.record import Artefact

    same_cubin = Artefact.create(key=make_key("other"), cubin=shared.cubin, meta={})
    with pytest.raises(StoreFullError):
        tier.put(same_cubin)
    assert backend.has_blob(shared.cubin_sha256)  # a cubin that was there before stays
    monkeypatch.undo()
    assert tier.get(shared.key) == shared and stored_files(tmp_path / "s") == (1, 1)


def stored_files(store: Path) -> tuple[int, int]:
    """(records, cubin value files on disk) of the store at ``store``."""
    keys, _ = stored(store)
    return len(keys), sum(1 for _ in (store / "blobs").rglob("*.val"))


def _killed_mid_blob(path: str, ready) -> None:
    """A put of a 20 MB cubin that stalls halfway through writing its value file (and is killed there)."""
    import diskcache.core

    from kbuild.cache.local import LocalBackend
    from kbuild.cache.tier import Tier

    def stall(self, full_path, iterator, mode, encoding=None):
        data = b"".join(iterator)
        os.makedirs(os.path.dirname(full_path), exist_ok=True)
        with open(full_path, mode) as f:
            f.write(data[: len(data) // 2])
            f.flush()
        ready.set()
        time.sleep(60)
        raise AssertionError("not killed")

    diskcache.core.Disk._write = stall
    Tier(LocalBackend(path)).put(make_artefact(f"killed-{os.getpid()}", size=20_000_000))


@hostile(fault="killed put", outcome="degraded with warning")
def test_gc_removes_half_written_cubins_of_killed_puts(tmp_path):
    import json
    import multiprocessing
    import signal

    store = tmp_path / "s"
    kept = make_artefact("kept", size=100_000)
    from kbuild.cache.local import LocalBackend
    from kbuild.cache.tier import Tier

    Tier(LocalBackend(store)).put(kept)
    ctx = multiprocessing.get_context("fork")
    for _ in range(3):
        ready = ctx.Event()
        child = ctx.Process(target=_killed_mid_blob, args=(str(store), ready))
        child.start()
        assert ready.wait(30) and child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
    assert stored_files(store) == (1, 4)  # three half-written 10 MB files that no entry names
    proc = kbuild("cache", "verify", "--store", str(store), "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["file_warnings"] == 3 and "half-written" in proc.stderr, proc.stderr
    proc = kbuild("cache", "gc", "--store", str(store), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["half_written_files"] == 3
    assert stored_files(store) == (1, 1)
    assert not [d for d in (store / "blobs").rglob("*") if d.is_dir() and not any(d.iterdir())]  # no empty dirs
    for fix in (["--fix"], [], []):  # no warnings left behind, now or on later runs
        proc = kbuild("cache", "verify", "--store", str(store), "--json", *fix, cwd=tmp_path)
        doc = json.loads(proc.stdout)
        assert proc.returncode == 0 and doc["ok"] is True and doc["file_warnings"] == 0, proc.stderr
    assert Tier(LocalBackend(store)).get(kept.key) == kept


@pytest.fixture
def read_only_store(tmpfs) -> tuple[Path, list]:
    disk = tmpfs("ro", "8m")
    store = disk / "store"
    from kbuild.cache.local import LocalBackend
    from kbuild.cache.tier import Tier

    backend = LocalBackend(store)
    arts = [make_artefact(f"ro{i}", size=50_000) for i in range(3)]
    for a in arts:
        Tier(backend).put(a)
    backend.close()
    proc = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"remounting read-only is not permitted here: {proc.stderr.strip()}")
    return store, arts


@hostile(fault="read-only store", outcome="served correct bytes")
@pytest.mark.parametrize("verb", ["get", "ls", "stats", "verify"])
def test_read_only_store_serves_reads(tmp_path, read_only_store, verb):
    import json

    store, arts = read_only_store
    args = {"get": ["get", arts[1].key, "-o", str(tmp_path / "out.cubin")], "ls": ["ls"], "stats": ["stats"],
            "verify": ["verify"]}[verb]
    proc = kbuild("cache", *args, "--store", str(store), "--json", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    if verb == "get":
        assert (tmp_path / "out.cubin").read_bytes() == arts[1].cubin
    elif verb == "ls":
        assert doc["count"] == len(arts)
    elif verb == "stats":
        assert doc["entries"] == len(arts)
    else:
        assert doc["ok"] is True and doc["checked"] == len(arts)


@hostile(fault="read-only store", outcome="clean error")
@pytest.mark.parametrize("verb", ["put", "gc", "rm", "verify --fix"])
def test_read_only_store_refuses_writes_clearly(tmp_path, read_only_store, verb):
    store, arts = read_only_store
    art = make_artefact("new", size=1000)
    (tmp_path / "c").write_bytes(art.cubin)
    args = {"put": ["put", "--key", art.key, "--cubin", str(tmp_path / "c")], "gc": ["gc"],
            "rm": ["rm", arts[0].key], "verify --fix": ["verify", "--fix"]}[verb]
    proc = kbuild("cache", *args, "--store", str(store), cwd=tmp_path)
    assert_clean_error(proc.returncode, proc.stderr, names=[str(store), "read-only"])


@hostile(fault="read-only store", outcome="degraded with warning")
def test_build_on_a_read_only_store_serves_hits_and_warns_once_about_misses(tmp_path, read_only_store, caplog):
    store, arts = read_only_store
    with caplog.at_level(logging.WARNING), open_store(settings(store)) as s:
        assert s.get(arts[2].key) == arts[2]
        s.put(make_artefact("miss-1"))
        s.put(make_artefact("miss-2"))
    assert caplog.text.count("is read-only") == 1, caplog.text


# ----------------------------------------------------------------------------------------------
# Clean errors: one line naming the file and key, exit 2, nothing written.

@hostile(fault="bad remote URL", outcome="clean error")
@pytest.mark.parametrize("url", ["http://xn--a.example/c", "http://a..b/", f"http://{'a' * 64}.example/",
                                 "https://exa mple.com/", "redis://xn--a.example:6379/0"])
def test_remote_host_that_is_no_valid_name_is_a_clean_error(tmp_path, monkeypatch, url):
    config = pyproject(tmp_path, [url])
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cache(["get", "--config", str(config), make_key("x")])
    assert_clean_error(code, err, names=[str(config), "remotes[0].url", "host '"])
    assert not (tmp_path / "store").exists()


def _nested(depth: int) -> str:
    return '{"kernel": "k", "deep": ' + "[" * depth + "]" * depth + "}"


@hostile(fault="deeply nested JSON", outcome="clean error")
@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_metadata_in_cache_put_is_a_clean_error(tmp_path, monkeypatch, depth):
    (tmp_path / "meta.json").write_text(_nested(depth))
    (tmp_path / "c.cubin").write_bytes(b"\x7fELF")
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cache(["put", "--store", str(tmp_path / "store"), "--key", make_key("n"), "--cubin",
                                 str(tmp_path / "c.cubin"), "--meta", str(tmp_path / "meta.json")])
    assert_clean_error(code, err, names=[str(tmp_path / "meta.json"), "nested deeper than 64 levels"])
    assert not (tmp_path / "store").exists()


@hostile(fault="deeply nested JSON", outcome="clean error")
@pytest.mark.parametrize("depth", [100, 100_000])
def test_deeply_nested_bundle_manifest_is_a_clean_error(tmp_path, monkeypatch, depth):
    import tarfile

    bundle = tmp_path / "deep.tar"
    manifest = ('{"format": "kbuild-bundle/1", "keys": ' + "[" * depth + "]" * depth + "}").encode()
    with tarfile.open(bundle, "w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("kbuild-bundle.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cache(["import", "--store", str(tmp_path / "store"), str(bundle)])
    assert_clean_error(code, err, names=[str(bundle), "kbuild-bundle.json", "nested deeper than 64 levels"])
    assert stored(tmp_path / "store") == ([], 0)


@pytest.mark.redis
@hostile(fault="deeply nested JSON", outcome="degraded with warning")
def test_deeply_nested_remote_record_is_a_corrupt_entry(redis_url, caplog):
    from kbuild.cache.redis_tier import RedisBackend
    from kbuild.cache.tier import Tier

    backend = RedisBackend(redis_url)
    key = make_key("nested-record")
    backend.client.set(backend._ac(key), ("[" * 100_000 + "]" * 100_000).encode())
    with caplog.at_level(logging.WARNING):
        assert Tier(backend, writable=False).get(key) is None
    assert "nested deeper than 64 levels" in caplog.text
    backend.close()


@hostile(fault="bad output path", outcome="clean error")
@pytest.mark.parametrize("where", ["directory", "missing directory", "read-only directory"])
def test_cache_export_to_a_bad_path_is_a_clean_error(tmp_path, monkeypatch, where, request):
    from hostile_helpers import tree_digest

    store = tmp_path / "store"
    open_store(settings(store)).close()
    if where == "directory":
        out = tmp_path / "out"
        out.mkdir()
    elif where == "missing directory":
        out = tmp_path / "missing" / "b.tar"
    else:
        ro = request.getfixturevalue("tmpfs")("ro-out", "1m")
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        out = ro / "b.tar"
    before = tree_digest(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cache(["export", "--store", str(store), str(out)])
    assert_clean_error(code, err, names=[str(out)])
    assert tree_digest(tmp_path) == before and not (tmp_path / "missing").exists()


@hostile(fault="bad output path", outcome="clean error")
@pytest.mark.parametrize("where", ["missing directory", "directory"])
def test_cache_get_output_in_a_missing_directory_is_a_clean_error(tmp_path, monkeypatch, where):
    store = tmp_path / "store"
    art = make_artefact("get-o")
    with open_store(settings(store)) as s:
        s.put(art)
    out = tmp_path / "missing" / "sub" / "k.cubin" if where == "missing directory" else tmp_path
    monkeypatch.chdir(tmp_path)
    code, _out, err = run_cache(["get", "--store", str(store), art.key, "-o", str(out)])
    assert_clean_error(code, err, names=[str(out)])
    assert not (tmp_path / "missing").exists()  # no directory was created


# ----------------------------------------------------------------------------------------------
# JSON and TOML readers of the store: a documented error for every bad document, never another exception.

@hostile(fault="malformed record", outcome="degraded with warning")
@pytest.mark.parametrize("edit", ["lone surrogate", "NaN", "surrogate signature", "non-ASCII signature"])
def test_records_without_a_canonical_form_are_integrity_or_signature_errors(edit):
    import json

    from kbuild.cache.record import IntegrityError, SignatureError, check_signature, parse_record

    art = make_artefact("canon")
    body = json.loads(art.record("k"))
    if edit == "lone surrogate":
        raw = art.record("k").replace(b'"kernel":"canon"', b'"kernel":"\\ud800"')
    elif edit == "NaN":
        raw = art.record("k").replace(b'"tuned":false', b'"tuned":NaN')
    else:
        body["signature"] = "hmac-sha256:\ud800" if edit == "surrogate signature" else "hmac-sha256:é"
        raw = json.dumps(body, ensure_ascii=True).encode()
    try:
        rec = parse_record(art.key, raw)
    except IntegrityError:  # the one JSON reader refuses text that is not valid Unicode wherever it stands
        assert edit in ("lone surrogate", "NaN", "surrogate signature")
        return
    with pytest.raises(SignatureError):
        check_signature(rec, "k")


@hostile(fault="malformed lock file", outcome="clean error")
@pytest.mark.parametrize("text", ["x = " + "[" * 100_000 + "]" * 100_000, "version = " + "9" * 5000,
                                  'version = 1\n[kernels."a\\nb"]\nsm_90 = 1\n',
                                  'version = 1\n[kernels.a."sm_90\\u001b[2J"]\nkey = 1\n'],
                         ids=["nested", "huge integer", "newline in a key", "escape in a key"])
def test_lock_file_errors_are_one_line(text):
    from kbuild.cache.lock import parse_lock
    from kbuild.errors import LockFileError

    with pytest.raises(LockFileError) as info:
        parse_lock(text, "kbuild.lock")
    message = str(info.value)
    assert message.startswith("kbuild.lock: ") and "\n" not in message and "\x1b" not in message


@hostile(fault="deeply nested JSON", outcome="degraded with warning")
def test_deeply_nested_statistics_file_is_ignored_with_a_warning(tmp_path, caplog):
    from kbuild.cache.stats import StoreStats, load_stats

    (tmp_path / "stats.json").write_text("[" * 100_000 + "]" * 100_000)
    with caplog.at_level(logging.WARNING):
        assert load_stats(tmp_path).as_dict() == StoreStats().as_dict()
    assert "unreadable statistics" in caplog.text
