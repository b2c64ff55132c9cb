"""One bad key in a shared tier, through the command line and in memory (issue 32, item 4), against real
redis-server and nginx: ``kbuild cache verify --all-tiers --fix`` repairs a key that holds no value, and a
size cap holds before a planted value is read (peak RSS of a child process, bytes the Redis server sent)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import make_artefact

from kbuild.cache.tier import Tier

hostile = pytest.mark.hostile
SECRET = "tier-faults-secret"


def kbuild(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)  # no KBUILD_* setting but those a test sets (conftest.py)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "kbuild", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=60)


@hostile(fault="key holding no value", outcome="degraded with warning")
@pytest.mark.parametrize("kind", [pytest.param("redis", marks=pytest.mark.redis),
                                  pytest.param("http", marks=pytest.mark.nginx)])
def test_cli_verify_fix_repairs_a_shared_key_holding_no_value(tmp_path, request, kind):
    """The issue's case: ``LPUSH kbuild:ac:<key> x`` (Redis) or ``PUT /ac/<key>/x`` (WebDAV) on a signed shared
    tier made ``verify --all-tiers --fix`` exit 4; now it names the key, deletes it, and the tier is whole."""
    url = request.getfixturevalue("redis_url" if kind == "redis" else "http_url")
    from kbuild.cache.open import backend_for_url

    backend = backend_for_url(url)
    tier = Tier(backend, secret=SECRET)
    arts = [make_artefact(f"cli-nv-{kind}-{i}") for i in range(3)]
    for a in arts:
        tier.put(a)
    bad = arts[0]
    if kind == "redis":
        backend.client.delete(backend._ac(bad.key))  # type: ignore[attr-defined]
        backend.client.lpush(backend._ac(bad.key), "x")  # type: ignore[attr-defined]
    else:
        server = request.getfixturevalue("nginx_server")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for method, path, body in (("DELETE", f"/ac/{bad.key}", None), ("PUT", f"/ac/{bad.key}/x", b"x")):
            conn.request(method, backend.prefix + path, body=body)  # type: ignore[attr-defined]
            conn.getresponse().read()
        conn.close()
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.kbuild]\nstore = "{tmp_path / "store"}"\n[[tool.kbuild.remotes]]\nurl = "{url}"\nwritable = true\n')
    env = {"KBUILD_STORE_SECRET": SECRET}

    proc = kbuild("cache", "verify", "--all-tiers", "--fix", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(p["key"], p["fixed"]) for p in doc["problems"]] == [(bad.key, True)], doc
    proc = kbuild("cache", "verify", "--all-tiers", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"checked": 2, "ok": True, "problems": [],
                                                                "file_warnings": 0}, proc.stderr
    tier.put(bad)  # the next writer stores the entry again
    out = tmp_path / "bad.cubin"
    proc = kbuild("cache", "get", bad.key, "-o", str(out), "--store", str(tmp_path / "fresh"), cwd=tmp_path, env=env)
    assert proc.returncode == 0 and out.read_bytes() == bad.cubin, proc.stderr
    backend.close()


# ----------------------------------------------------------------------------------------------
# Size caps before the bytes: a 64 MiB value planted under the digest of a 1000-byte cubin.

PLANTED = 64 << 20

#: The child reads the entry and reports how much its peak RSS grew. The peak is VmHWM of /proc/self/status: the
#: high-water mark of this process's own memory (getrusage's ru_maxrss would start at the parent's peak, which
#: Linux carries across exec, and hide anything smaller).
_CHILD = """
import json, sys
from kbuild.cache.open import backend_for_url
from kbuild.cache.local import LocalBackend
from kbuild.cache.tier import Tier

def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

kind, where, key = sys.argv[1:4]
backend = LocalBackend(where) if kind == "local" else backend_for_url(where)
tier = Tier(backend, writable=False)
tier.get("0" * 64)  # connect (and load the script) before measuring
before = peak_kib()
hit = tier.get(key) is not None
print(json.dumps({"hit": hit, "grew_kib": peak_kib() - before}))
"""


@hostile(fault="oversized cubin", outcome="degraded with warning")
def test_a_planted_giant_cubin_is_refused_before_it_is_read(case, request):
    if not Path("/proc/self/status").is_file():
        pytest.skip("measures peak RSS through /proc/self/status (Linux)")
    """The issue's 300 MB Redis value cost 945 MB of RSS: the cap was 256 MiB (MAX_BLOB_BYTES), read before it
    held. Now the cap is the size the record states, known before a byte of the value is read, in every tier."""
    art = make_artefact("giant-under-a-small-record", size=1000)
    tier = case.tier()
    tier.put(art)
    giant = b"\x7f" * PLANTED
    if case.kind == "http":
        root = request.getfixturevalue("nginx_server").root
        (root / case.url.rsplit("/", 1)[1] / "cas" / art.cubin_sha256).write_bytes(giant)
    else:
        case.corrupt_blob(art.cubin_sha256, giant)
    del giant
    where = str(case.backend.path) if case.kind == "local" else case.url  # type: ignore[attr-defined]
    proc = subprocess.run([sys.executable, "-c", _CHILD, case.kind, where, art.key], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["grew_kib"] < 8 << 10, f"peak RSS grew by {doc['grew_kib'] >> 10} MiB reading the entry"
    assert doc["hit"] is False and "over the 1000-byte cap" in proc.stderr, proc.stderr


@pytest.mark.redis
@hostile(fault="oversized record", outcome="degraded with warning")
def test_redis_value_over_the_cap_never_crosses_the_wire(redis_url, caplog):
    """The cap holds on the server: a 16 MiB record (cap 1 MiB) costs its length, not a 1 MiB prefix of it."""
    from kbuild.cache.redis_tier import RedisBackend

    backend = RedisBackend(redis_url)
    art = make_artefact("wire")
    backend.client.set(backend._ac(art.key), b"{" * (16 << 20))
    tier = Tier(backend, writable=False)
    tier.get("0" * 64)

    def sent() -> int:
        return int(backend.client.info("stats")["total_net_output_bytes"])

    before = sent()
    assert tier.get(art.key) is None
    assert sent() - before < 64 << 10, f"the server sent {(sent() - before) >> 10} KiB"
    assert "over the 1048576-byte cap" in caplog.text
    backend.close()
