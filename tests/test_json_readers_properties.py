"""Property tests of every reader of JSON (and the TOML lock file) that kbuild did not write itself (issue 13).

Each reader gets arbitrary bytes, arbitrary JSON (NaN, Infinity and lone surrogates included), a valid document
with random edits, and documents nested 100,000 levels deep (``json.loads`` raises RecursionError on those,
which is no ValueError). Only the reader's documented outcome may come out:

========================================  ==========================================================
reader                                    documented outcome on bad input
========================================  ==========================================================
``cache.record.parse_record``             :class:`IntegrityError` (``check_signature``: SignatureError)
``cache.bundle.read_bundle``              :class:`BundleError`; ``kbuild cache import`` exits 2
``cache.lock.parse_lock`` / ``read_lock`` :class:`LockFileError`
``build.manifest.parse_manifest`` etc.    :class:`UsageError`; ``kbuild inspect`` exits 2
``build.memo.load``                       None (a miss)
``kbuild.runtime.index.parse_index``      :class:`IndexFormatError`
``cache.stats.load_stats``                empty :class:`StoreStats` (with a warning)
HTTP tier ``record_keys`` (``GET /ac/``)  :class:`TierUnavailableError`
``kbuild cache put --meta FILE``          exit 2
``kbuild tune --configs-from FILE``       :class:`UsageError`
``benchmarks/tune_table.py``              exit 2, one line
========================================  ==========================================================

Example counts are small (the whole file runs in well under a minute on two cores); each run draws new ones.
"""

from __future__ import annotations

import http.server
import io
import json
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from property_helpers import deep_json, json_values, mutated, toml_document
from script_helpers import load_benchmark

from kbuild.build.manifest import MANIFEST_FORMAT, parse_manifest
from kbuild.cache.bundle import BUNDLE_FORMAT, MANIFEST, read_bundle
from kbuild.cache.http import HttpBackend
from kbuild.cache.lock import LockEntry, format_lock, parse_lock, read_lock
from kbuild.cache.record import (
    Artefact,
    IntegrityError,
    Record,
    SignatureError,
    check_signature,
    parse_record,
)
from kbuild.cache.stats import StoreStats, load_stats
from kbuild.cli import main
from kbuild.commands.tune import autotuned_configs
from kbuild.errors import BundleError, LockFileError, TierUnavailableError, UsageError
from kbuild.key import KEY_SCHEMA, digest
from kbuild.runtime.index import INDEX_FORMAT, INDEX_VERSION, Index, IndexFormatError, load_index, parse_index

ROOT = Path(__file__).resolve().parent.parent
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLI = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HOSTILE = pytest.mark.hostile(fault="malformed JSON", outcome="clean error")

KEY = "ab" * 32
CUBIN = b"\x7fELF" + bytes(range(60))
ART = Artefact.create(key=KEY, cubin=CUBIN, meta={"kernel": "add", "target": "sm_90", "speedup": 1.5})
VALID_RECORD = json.loads(ART.record())


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN/Infinity as such, lone surrogates as \ud800 escapes


def documents(valid: Any) -> st.SearchStrategy[bytes]:
    """Bytes a reader of ``valid``-shaped JSON may be handed."""
    return st.one_of(
        st.binary(max_size=200),
        json_values(finite=False, unicode=False).map(dumps),
        mutated(valid, json_values(finite=False, unicode=False)).map(dumps),
        mutated(valid, json_values(finite=False, unicode=False)).map(dumps),
        deep_json().map(str.encode),
    )


def no_escapes(text: str) -> bool:
    """No terminal control sequence (ESC, or the one-byte CSI) reaches the terminal."""
    return "\x1b" not in text and "\x9b" not in text


# --- store records ----------------------------------------------------------------------------------

@HOSTILE
@FAST
@given(documents(VALID_RECORD))
def test_parse_record(raw: bytes):
    try:
        rec = parse_record(KEY, raw)
    except IntegrityError:
        return
    assert isinstance(rec, Record) and rec.key == KEY
    try:
        check_signature(rec, "secret")
    except SignatureError:
        pass


# --- bundles ----------------------------------------------------------------------------------------

VALID_BUNDLE_MANIFEST = {"format": BUNDLE_FORMAT, "keys": [KEY]}


def bundle_bytes(manifest: bytes, record: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in ((MANIFEST, manifest), (f"ac/{KEY}", record), (f"cas/{ART.cubin_sha256}", CUBIN)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_the_valid_bundle_reads():
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.tar"
        path.write_bytes(bundle_bytes(dumps(VALID_BUNDLE_MANIFEST), ART.record()))
        assert [a.key for a, _ in read_bundle(path)] == [KEY]


@HOSTILE
@FAST
@given(documents(VALID_BUNDLE_MANIFEST), documents(VALID_RECORD) | st.just(ART.record()))
def test_read_bundle(manifest: bytes, record: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.tar"
        path.write_bytes(bundle_bytes(manifest, record))
        try:
            entries = read_bundle(path)
        except BundleError as exc:
            assert str(exc).startswith(str(path)) and no_escapes(str(exc))
            return
        assert all(a.cubin == CUBIN for a, _ in entries)


@HOSTILE
@CLI
@given(documents(VALID_BUNDLE_MANIFEST))
def test_cache_import_exits_0_or_2(capsys, manifest: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "b.tar"
        path.write_bytes(bundle_bytes(manifest, ART.record()))
        code, out, err = run_cli(capsys, "cache", "import", "--store", str(Path(d) / "store"), str(path))
    assert_exit_0_or_2(code, out, err)


# --- the lock file (TOML) -------------------------------------------------------------------------

VALID_LOCK = format_lock([LockEntry("add", "sm_90", KEY, ART.cubin_sha256)])


def lock_texts() -> st.SearchStrategy[str]:
    import tomllib

    valid = tomllib.loads(VALID_LOCK)
    toml_values = json_values(unicode=True)
    return st.one_of(
        st.text(max_size=200),
        mutated(valid, toml_values).filter(lambda d: isinstance(d, dict)).map(lambda d: toml_document(d, None)),
        st.sampled_from(["kernels = " + "[" * 100_000 + "]" * 100_000, "version = " + "9" * 5000,
                         "x = " + "{a=" * 50_000 + "1" + "}" * 50_000]),
    )


@HOSTILE
@FAST
@given(lock_texts())
def test_parse_lock(text: str):
    try:
        entries = parse_lock(text, "kbuild.lock")
    except LockFileError as exc:
        assert str(exc).startswith("kbuild.lock: ") and "\n" not in str(exc)
        return
    assert all(isinstance(e, LockEntry) for e in entries)


@HOSTILE
@FAST
@given(st.binary(max_size=200) | lock_texts().map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_read_lock(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kbuild.lock"
        path.write_bytes(data)
        try:
            read_lock(path)
        except LockFileError as exc:
            assert str(exc).startswith(str(path))


# --- wheel manifests --------------------------------------------------------------------------------

VALID_MANIFEST = {"format": MANIFEST_FORMAT, "kbuild_version": "0.1.0", "tune": "auto", "kernels": [
    {"kernel": "add", "target": "sm_90", "arch": "sm_90a", "key": KEY, "baseline_key": KEY,
     "cubin_sha256": ART.cubin_sha256, "cubin_bytes": len(CUBIN), "symbol": "add", "source": "pkg.mod:add",
     "state": "tuned", "speedup": 1.5}]}


@HOSTILE
@FAST
@given(documents(VALID_MANIFEST))
def test_parse_manifest(data: bytes):
    try:
        doc = parse_manifest(data, "w.whl!x.dist-info/kbuild.json")
    except UsageError as exc:
        assert str(exc).startswith("w.whl!x.dist-info/kbuild.json: ") and no_escapes(str(exc))
        return
    assert isinstance(doc, dict) and isinstance(doc["kernels"], list)


@HOSTILE
@CLI
@given(documents(VALID_MANIFEST), st.booleans(), st.booleans())
def test_inspect_exits_0_or_2(capsys, data: bytes, as_wheel: bool, as_json: bool):
    """``kbuild inspect`` on an untrusted manifest, alone or inside a wheel: exit 0 or 2, no traceback,
    no terminal escape sequence printed."""
    with tempfile.TemporaryDirectory() as d:
        if as_wheel:
            path = Path(d) / "x-1.0-py3-none-any.whl"
            with zipfile.ZipFile(path, "w") as zf:
                zf.writestr("x-1.0.dist-info/kbuild.json", data)
        else:
            path = Path(d) / "kbuild.json"
            path.write_bytes(data)
        code, out, err = run_cli(capsys, "inspect", str(path), *(["--json"] if as_json else []))
    assert_exit_0_or_2(code, out, err)
    assert no_escapes(out) and no_escapes(err), (out, err)


# --- the runtime index ------------------------------------------------------------------------------

def _valid_index() -> dict[str, Any]:
    components = {"kernel": "add", "target": {"arch": "sm_90a", "cc": 90}}
    sha = ART.cubin_sha256
    entry = {"function": "pkg.mod:add", "source_hash": "h", "signature": {"x": "*fp32"}, "constexprs": {"B": 1},
             "options": {"num_warps": 4}, "target": {"cc": 90}, "triton_version": "3.6.0", "ptxas_version": "12.8",
             "checks": {"name": "add"}, "cubin": f"{sha}.cubin", "cubin_sha256": sha, "key_components": components,
             "tuned": False}
    return {"format": INDEX_FORMAT, "version": INDEX_VERSION, "key_schema": KEY_SCHEMA, "package": "pkg",
            "entries": {digest(components): entry}}


VALID_INDEX = _valid_index()


def test_the_valid_index_parses():
    assert len(parse_index(dumps(VALID_INDEX), data_dir=Path("."), where="i").entries) == 1


@HOSTILE
@FAST
@given(documents(VALID_INDEX))
def test_parse_index(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "index.json"
        path.write_bytes(data)
        for read in (lambda: parse_index(data, data_dir=Path(d), where=str(path)), lambda: load_index(path)):
            try:
                index = read()
            except IndexFormatError as exc:
                assert str(exc).startswith(str(path)) and no_escapes(str(exc))
                continue
            assert isinstance(index, Index)
            index.by_function()


# --- store statistics -------------------------------------------------------------------------------

VALID_STATS = StoreStats.from_dict({"tiers": {"local": {"hits": 3, "misses": 1}}, "time_saved_seconds": 2.5}).as_dict()


@HOSTILE
@FAST
@given(documents(VALID_STATS))
def test_load_stats(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "stats.json").write_bytes(data)
        stats = load_stats(Path(d))
        assert isinstance(stats, StoreStats)
        stats.as_dict()


# --- the HTTP tier's listing ------------------------------------------------------------------------

class _Listing(http.server.BaseHTTPRequestHandler):
    body = b"[]"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def listing_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Listing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/cache"
    server.shutdown()
    server.server_close()


@HOSTILE
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(documents([{"name": KEY, "type": "file", "mtime": "x", "size": 10}]))
def test_http_listing(listing_server: str, body: bytes):
    _Listing.body = body
    backend = HttpBackend(listing_server)
    try:
        keys = list(backend.record_keys())
    except TierUnavailableError:
        return
    finally:
        backend.close()
    assert all(isinstance(k, str) and len(k) == 64 for k in keys)


# --- metadata given to `kbuild cache put --meta` ----------------------------------------------------

@HOSTILE
@CLI
@given(documents({"kernel": "add", "target": "sm_90", "speedup": 1.5}))
def test_cache_put_meta_exits_0_or_2(capsys, meta: bytes):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "meta.json").write_bytes(meta)
        (Path(d) / "a.cubin").write_bytes(CUBIN)
        code, out, err = run_cli(capsys, "cache", "put", "--store", str(Path(d) / "store"), "--key", KEY,
                                 "--cubin", str(Path(d) / "a.cubin"), "--meta", str(Path(d) / "meta.json"))
    assert_exit_0_or_2(code, out, err)


# --- `kbuild tune --configs-from` -------------------------------------------------------------------

@HOSTILE
@FAST
@given(documents({"kernels": [{"name": "softmax", "best_label": "BLOCK=1024"}]}))
def test_autotuned_configs(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.json"
        path.write_bytes(data)
        try:
            configs = autotuned_configs(str(path))
        except UsageError as exc:
            assert "--configs-from" in str(exc) and no_escapes(str(exc))
            return
        assert isinstance(configs, dict)


# --- benchmarks/tune_table.py -----------------------------------------------------------------------

TUNE_TABLE = load_benchmark("tune_table")
VALID_REPORT = json.loads((ROOT / "benchmarks" / "results" / "h200" / "softmax.tune.json").read_text())


@HOSTILE
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(documents(VALID_REPORT))
def test_tune_table(capsys, data: bytes):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "softmax.tune.json").write_bytes(data)
        capsys.readouterr()
        code = TUNE_TABLE.main([d])
        out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 2:
        assert out == "" and err.count("\n") == 1 and no_escapes(err), err


# --- the memo ---------------------------------------------------------------------------------------

TRITON_CACHE = tempfile.mkdtemp(prefix="kbuild-memo-triton-")


@pytest.fixture(scope="module")
def memo_case(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Path, dict[str, Any]]:
    """A real memo written by a real compile of the example's softmax for sm_90."""
    import shutil

    from kbuild.build import memo
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.resolve import select_kernels, select_targets
    from kbuild.settings.sources import load_settings

    project = tmp_path_factory.mktemp("memo") / "project"
    shutil.copytree(ROOT / "examples" / "cmake-extension", project,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "dist"))
    for name in [m for m in sys.modules if m.startswith("kbx_demo")]:  # another test's copy of the example
        del sys.modules[name]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", TRITON_CACHE)
        s = load_settings(project / "pyproject.toml", environ={"KBUILD_STORE": str(project.parent / "store")})
        kernels, targets = select_kernels(s, ["softmax"]), select_targets(s, ["sm_90"])
        run_pipeline(s, kernels=["softmax"], targets=["sm_90"], memo=True)
        files = sorted((project.parent / "store" / "memo").glob("*.json"))
        if not files:
            pytest.skip("this build wrote no memo (no Triton version known?)")
        assert memo.load(s, kernels, targets) is not None
    return s, kernels, targets, files[0], json.loads(files[0].read_text())


@HOSTILE
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.data())
def test_memo_load_is_a_miss_or_a_list(memo_case, data: st.DataObject):
    from kbuild.build import memo

    s, kernels, targets, path, valid = memo_case
    raw = data.draw(documents(valid))
    original = path.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", TRITON_CACHE)  # as when the memo was written: the same memo file
        assert memo.load(s, kernels, targets) is not None
        try:
            path.write_bytes(raw)
            result = memo.load(s, kernels, targets)
        finally:
            path.write_bytes(original)
    assert result is None or isinstance(result, list)


# --- helpers ----------------------------------------------------------------------------------------

def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_exit_0_or_2(code: int, out: str, err: str) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith("error: ") and err.count("\n") == 1, err
