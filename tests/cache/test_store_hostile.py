"""The store against hostile servers, entries, disks and input (issue 13): each case is marked with
its fault class and the promised outcome, and runs against real servers on loopback."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_helpers import assert_clean_error
from store_helpers import drip_server, make_artefact, make_key

from kbuild.cache import TierUnavailableError, open_store
from kbuild.config import RemoteSettings, settings_from_table

hostile = pytest.mark.hostile


def settings(store: Path, remotes: list[tuple[str, bool]] = (), secret: str | None = None, **table: object):
    s = settings_from_table({"store": str(store), **table}, environ={})
    return dataclasses.replace(s, remotes=[RemoteSettings(url=u, writable=w) for u, w in remotes],
                               store_secret=secret)


def kbuild(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command line, in a child process (its own environment, exit status and stderr)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("KBUILD_")}
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
    from kbuild.cache.store import Artefact

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
        assert store.get(good.key).cubin == fake
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
    from kbuild.cache.store import Artefact

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
