"""`kbuild cache ...`: every sub-verb, its --json document, exit statuses for bad input."""

from __future__ import annotations

import argparse
import json
import tarfile

import pytest
from store_helpers import make_artefact, make_key

from kbuild.cache import cli as cache_cli
from kbuild.errors import KBuildError


def run(argv, capsys):
    """What kbuild.cli.main does for the `cache` verb: parse, run the handler, map errors to statuses."""
    parser = argparse.ArgumentParser(prog="kbuild")
    cache_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        err = ""
    except KBuildError as exc:
        code, err = exc.exit_code, str(exc)
    out = capsys.readouterr()
    return code, out.out, out.err + err


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no pyproject.toml here: defaults plus --store
    return ["--store", str(tmp_path / "store")]


def put(tmp_path, capsys, store, name, **meta):
    art = make_artefact(name, size=2000, **meta)
    (tmp_path / f"{name}.cubin").write_bytes(art.cubin)
    (tmp_path / f"{name}.json").write_text(json.dumps(art.meta))
    code, out, err = run(["cache", "put", *store, "--json", "--key", art.key, "--cubin", str(tmp_path / f"{name}.cubin"),
                          "--meta", str(tmp_path / f"{name}.json")], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cubin_sha256"] == art.cubin_sha256 and doc["meta_sha256"] == art.meta_sha256
    return art


def test_put_get_ls_stats_rm_gc(tmp_path, capsys, store):
    a = put(tmp_path, capsys, store, "one", target="sm_90", tuned=True, tune_seconds=30.0)
    b = put(tmp_path, capsys, store, "two", target="sm_80")

    code, out, _ = run(["cache", "get", *store, a.key, "-o", str(tmp_path / "out.cubin"), "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["hit"] is True and doc["meta"] == a.meta
    assert (tmp_path / "out.cubin").read_bytes() == a.cubin

    code, out, _ = run(["cache", "get", *store, make_key("nope"), "--json"], capsys)
    assert (code, json.loads(out)) == (1, {"key": make_key("nope"), "hit": False})

    code, out, _ = run(["cache", "ls", *store, "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["count"] == 2 and {e["key"] for e in doc["entries"]} == {a.key, b.key}
    code, out, _ = run(["cache", "ls", *store, "--json", "--target", "sm_80"], capsys)
    assert [e["key"] for e in json.loads(out)["entries"]] == [b.key]
    code, out, err = run(["cache", "ls", *store], capsys)
    assert code == 0 and out == "" and "2 entries" in err  # tables go to stderr

    code, out, _ = run(["cache", "stats", *store, "--json"], capsys)
    doc = json.loads(out)
    assert doc["entries"] == 2 and doc["tuned"] == 1 and doc["by_target"] == {"sm_80": 1, "sm_90": 1}
    assert (doc["tiers"]["local"]["hits"], doc["tiers"]["local"]["misses"]) == (1, 1)  # the two `get`s above
    assert doc["time_saved_seconds"] == pytest.approx(32.0)  # compile 2 s + tune 30 s of the hit

    code, out, _ = run(["cache", "rm", *store, a.key, make_key("absent"), "--json"], capsys)
    assert code == 1 and json.loads(out) == {"removed": [a.key], "missing": [make_key("absent")]}

    code, out, _ = run(["cache", "gc", *store, "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["entries"] == 1 and doc["orphan_blobs"] == 1

    code, out, _ = run(["cache", "stats", *store, "--json", "--reset"], capsys)
    assert json.loads(out)["tiers"] == {}


def test_verify_reports_and_fixes(tmp_path, capsys, store):
    a = put(tmp_path, capsys, store, "v1", target="sm_90")
    put(tmp_path, capsys, store, "v2", target="sm_90")
    from kbuild.cache.local import LocalBackend

    backend = LocalBackend(tmp_path / "store")
    backend._blobs.set(a.cubin_sha256, b"flipped")
    backend.close()
    code, out, _ = run(["cache", "verify", *store, "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["checked"] == 2
    assert [(p["key"], p["fixed"]) for p in doc["problems"]] == [(a.key, False)]
    code, out, _ = run(["cache", "verify", *store, "--json", "--fix"], capsys)
    assert code == 0 and json.loads(out)["problems"][0]["fixed"] is True
    code, out, _ = run(["cache", "verify", *store, "--json"], capsys)
    assert (code, json.loads(out)["checked"], json.loads(out)["problems"]) == (0, 1, [])


def test_export_import(tmp_path, capsys, store):
    put(tmp_path, capsys, store, "e1", target="sm_90")
    put(tmp_path, capsys, store, "e2", target="sm_80")
    code, out, _ = run(["cache", "export", *store, str(tmp_path / "b.tar.gz"), "--target", "sm_90", "--json"], capsys)
    assert code == 0 and json.loads(out)["entries"] == 1
    other = ["--store", str(tmp_path / "other")]
    code, out, _ = run(["cache", "import", *other, str(tmp_path / "b.tar.gz"), "--json"], capsys)
    assert code == 0 and json.loads(out)["imported"] == 1
    code, out, _ = run(["cache", "ls", *other, "--json"], capsys)
    assert json.loads(out)["count"] == 1


def test_bad_input_exits_2_and_names_the_thing(tmp_path, capsys, store):
    (tmp_path / "junk.tar").write_bytes(b"not a tar" * 100)
    code, _, err = run(["cache", "import", *store, str(tmp_path / "junk.tar")], capsys)
    assert code == 2 and "junk.tar" in err and "not a kbuild bundle" in err

    code, _, err = run(["cache", "get", *store, "not-a-key"], capsys)
    assert code == 2 and "not-a-key" in err

    (tmp_path / "x.cubin").write_bytes(b"x")
    (tmp_path / "bad.json").write_text("{oops")
    code, _, err = run(["cache", "put", *store, "--key", make_key("k"), "--cubin", str(tmp_path / "x.cubin"),
                        "--meta", str(tmp_path / "bad.json")], capsys)
    assert code == 2 and "bad.json" in err
    code, _, err = run(["cache", "put", *store, "--key", make_key("k"), "--cubin", str(tmp_path / "missing.cubin")], capsys)
    assert code == 2 and "missing.cubin" in err

    (tmp_path / "file").write_text("")
    code, _, err = run(["cache", "ls", "--store", str(tmp_path / "file"), "--json"], capsys)
    assert code == 2 and "store directory" in err

    (tmp_path / "pyproject.toml").write_text('[tool.kbuild]\nremotes = [{url = "gopher://x"}]\n')
    code, _, err = run(["cache", "ls", *store], capsys)
    assert code == 2 and "gopher://" in err and "pyproject.toml" in err
    code, _, err = run(["cache", "ls", *store, "--json", "--config", str(tmp_path / "none.toml")], capsys)
    assert code == 2 and "none.toml" in err
    (tmp_path / "pyproject.toml").unlink()
    code, out, _ = run(["cache", "ls", *store, "--json"], capsys)  # nothing was stored by any of these
    assert (code, json.loads(out)["count"]) == (0, 0)


def test_bad_bundle_leaves_store_unchanged(tmp_path, capsys, store):
    a = put(tmp_path, capsys, store, "keep", target="sm_90")
    with tarfile.open(tmp_path / "evil.tar", "w") as tar:
        info = tarfile.TarInfo("../../escape")
        tar.addfile(info)
    code, _, err = run(["cache", "import", *store, str(tmp_path / "evil.tar")], capsys)
    assert code == 2 and "'..'" in err
    code, out, _ = run(["cache", "ls", *store, "--json"], capsys)
    assert [e["key"] for e in json.loads(out)["entries"]] == [a.key]


def test_remote_down_is_a_warning_and_strict_fails(tmp_path, capsys, store):
    from store_helpers import free_port

    (tmp_path / "pyproject.toml").write_text(
        f'[tool.kbuild]\nremotes = [{{url = "http://127.0.0.1:{free_port()}/c", writable = true}}]\n')
    a = put(tmp_path, capsys, store, "d", target="sm_90")
    code, out, _ = run(["cache", "get", *store, a.key, "--json"], capsys)
    assert code == 0 and json.loads(out)["hit"]
    code, out, _ = run(["cache", "get", *store, make_key("zz"), "--json", "--strict"], capsys)
    assert code == 4


def test_every_answer_is_an_exit_code_of_the_table(tmp_path, capsys, store):
    """The handlers return members of kbuild.errors.ExitCode (issue 14), not literal numbers: OK for an
    answer, FAILED for a negative one (a miss, a key rm did not find, problems verify left)."""
    from kbuild.cache.local import LocalBackend
    from kbuild.errors import ExitCode

    def answer(*argv: str) -> object:
        parser = argparse.ArgumentParser(prog="kbuild")
        cache_cli.add_parser(parser.add_subparsers(dest="command"))
        args = parser.parse_args(["cache", argv[0], *store, "--json", *argv[1:]])
        result = args.func(args)
        capsys.readouterr()
        return result

    art = put(tmp_path, capsys, store, "codes", target="sm_90")
    absent = make_key("absent")
    assert answer("get", art.key, "-o", str(tmp_path / "out.cubin")) is ExitCode.OK
    assert answer("get", absent) is ExitCode.FAILED
    assert answer("rm", absent) is ExitCode.FAILED
    assert answer("verify") is ExitCode.OK
    backend = LocalBackend(tmp_path / "store")
    backend._blobs.set(art.cubin_sha256, b"flipped")
    backend.close()
    assert answer("verify") is ExitCode.FAILED
    assert answer("verify", "--fix") is ExitCode.OK
    assert answer("ls") is ExitCode.OK and answer("stats") is ExitCode.OK
