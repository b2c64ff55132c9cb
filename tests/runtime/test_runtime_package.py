"""The build side: package data for ship = "package-data" (index, cubins, generated enabling module)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import JIT_EXAMPLE, make_tuned

import kbuild.runtime
from kbuild.build.package_data import write_package_data
from kbuild.cli import main
from kbuild.runtime.index import DATA_DIR, INDEX_FILE, load_index
from kbuild.settings.variables import Override


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_index_is_deterministic(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> None:
    a = write_package_data(jit_settings, tuned_builds, tmp_path / "a" / "kbx_jit")
    b = write_package_data(jit_settings, list(reversed(tuned_builds)), tmp_path / "b" / "kbx_jit")
    assert tree(a.data_dir) == tree(b.data_dir)
    again = write_package_data(jit_settings, tuned_builds, tmp_path / "a" / "kbx_jit")
    assert tree(again.data_dir) == tree(b.data_dir)
    text = (a.data_dir / INDEX_FILE).read_text()
    assert "created" not in text and str(tmp_path) not in text and "/work/" not in text
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) + "\n"  # compact


def test_an_index_over_16_mib_is_read(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> None:
    """A package of a few thousand specialisations has an index over the 16 MiB other JSON documents are held to
    (fla-core's tests launch about 2,000 per target): the run time and ``kbuild inspect``'s parse read it whole."""
    from kbuild.jsonio import DEFAULT_MAX_BYTES
    from kbuild.key import digest
    from kbuild.runtime.index import MAX_INDEX_BYTES, index_bytes, parse_index

    result = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    doc = json.loads((result.data_dir / INDEX_FILE).read_text())
    entry = next(iter(doc["entries"].values()))
    entries = {}
    for i in range(4500):  # the same entry for 4,500 BLOCK values, each its own cubin (not on disk: not read here)
        e = json.loads(json.dumps(entry))
        e["key_components"]["kernel"]["constexprs"] = {"BLOCK": 16 * (i + 1)}
        e["cubin_sha256"] = f"{i:064x}"
        e["cubin"] = f"{i:064x}.cubin"
        entries[digest(e["key_components"])] = e
    data = index_bytes({**doc, "entries": entries})
    assert DEFAULT_MAX_BYTES < len(data) < MAX_INDEX_BYTES
    (result.data_dir / INDEX_FILE).write_bytes(data)
    assert len(load_index(result.data_dir / INDEX_FILE).entries) == 4500
    assert len(parse_index(data, data_dir=result.data_dir, where="big").entries) == 4500
    assert kbuild.runtime.enable("kbx_jit", data_dir=result.data_dir)
    kbuild.runtime.disable("kbx_jit")


def test_index_entries(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> None:
    result = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    index = load_index(result.data_dir / INDEX_FILE)
    assert index.package == "kbx_jit"
    assert {e["target"]["arch"] for e in index.entries.values()} == {"sm_90a", "sm_80"}
    for key, entry in index.entries.items():
        build = next(b for b in tuned_builds if b.baseline_key.hex == key)
        assert entry["artefact_key"] == build.tuned_key.hex != key
        assert entry["function"] == "kbx_jit.kernels:softmax"
        assert entry["signature"]["in_ptr"] == "*fp16:16" and entry["constexprs"] == {"BLOCK": 1024}
        assert entry["options"]["num_warps"] == 4 and entry["options"]["num_stages"] == 3
        assert entry["triton_version"] == "3.6.0" and entry["source_hash"] == str(build.fn.cache_key)
        assert entry["checks"]["name"] == entry["symbol"] == "softmax"
        assert entry["tuned"] is True and entry["speedup"] == 1.25
        assert (result.data_dir / entry["cubin"]).read_bytes() == build.artefact.cubin
    assert sorted(result.relative_files(tmp_path)) == sorted(
        [f"kbx_jit/{DATA_DIR}/{n}" for n in ("__init__.py", INDEX_FILE)]
        + [f"kbx_jit/{DATA_DIR}/{e['cubin']}" for e in index.entries.values()])


def test_every_kernel_ships_by_default_and_stale_files_go(jit_settings: Any, baseline_builds: list[Any],
                                                          tuned_builds: list[Any], tmp_path: Path) -> None:
    """package_data = "all" (default): the baseline ships where there is no tuning result, and says so; "tuned"
    ships accepted tuning results only, and the stale baseline cubin goes."""
    first = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    assert len(list(first.data_dir.glob("*.cubin"))) == 2
    mixed = [tuned_builds[0], dataclasses.replace(baseline_builds[1])]
    second = write_package_data(jit_settings, mixed, tmp_path / "kbx_jit")
    assert jit_settings.package_data == "all" and second.skipped == []
    states = {e["target"]["name"]: (e["state"], e["tuned"], e["cubin_sha256"]) for e in second.index["entries"].values()}
    assert states == {tuned_builds[0].target.name: ("tuned", True, tuned_builds[0].artefact.cubin_sha256),
                      baseline_builds[1].target.name: ("baseline", False, baseline_builds[1].artefact.cubin_sha256)}
    assert len(list(second.data_dir.glob("*.cubin"))) == 2
    only_tuned = dataclasses.replace(jit_settings, package_data="tuned")
    third = write_package_data(only_tuned, mixed, tmp_path / "kbx_jit")
    assert len(third.index["entries"]) == 1 and len(list(third.data_dir.glob("*.cubin"))) == 1
    assert [(k, t) for k, t, _ in third.skipped] == [("softmax", baseline_builds[1].target.name)]
    assert 'package_data = "tuned"' in third.skipped[0][2]
    forced = write_package_data(only_tuned, mixed, tmp_path / "kbx_jit", include_untuned=True)
    assert [e["tuned"] for e in forced.index["entries"].values()].count(False) == 1


def test_generated_module_enables_the_package(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "kbx_runtime_demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import _kbuild  # noqa: F401\n")
    write_package_data(jit_settings, tuned_builds, pkg, package="kbx_runtime_demo")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("kbx_runtime_demo._kbuild")
        assert module.ENABLED is True
        assert kbuild.runtime.enabled_packages() == ["kbx_runtime_demo"]
    finally:
        for name in [m for m in sys.modules if m.startswith("kbx_runtime_demo")]:
            del sys.modules[name]


def test_package_name_is_inferred_or_required(jit_settings: Any, tuned_builds: list[Any], tmp_path: Path) -> None:
    from kbuild.errors import UsageError

    assert write_package_data(jit_settings, tuned_builds, tmp_path / "p").package == "kbx_jit"
    other = dataclasses.replace(tuned_builds[0], spec=dataclasses.replace(tuned_builds[0].spec, source="other.mod:softmax"))
    with pytest.raises(UsageError, match="pass the package"):
        write_package_data(jit_settings, [tuned_builds[1], other], tmp_path / "q")


def test_cli_package_data(tmp_path: Path, capsys: pytest.CaptureFixture[str], kbuild_env: Override) -> None:
    kbuild_env.set(store=tmp_path / "store")
    out = tmp_path / "build" / "kbx_jit"
    rc = main(["package-data", "--config", str(JIT_EXAMPLE / "pyproject.toml"), "--out", str(out), "--targets", "sm_90",
               "--kernel", "softmax", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    # A CPU build has no tuned entries in a fresh store: the baseline ships (package_data = "all", the default).
    assert [e["tuned"] for e in doc["entries"]] == [False] and doc["skipped"] == []
    assert (out / DATA_DIR / INDEX_FILE).is_file()
    rc = main(["package-data", "--config", str(JIT_EXAMPLE / "pyproject.toml"), "--out", str(out), "--targets", "sm_90",
               "--kernel", "softmax", "--include-untuned", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and [e["tuned"] for e in doc["entries"]] == [False]


def test_make_tuned_helper_keeps_keys_apart(jit_settings: Any, baseline_builds: list[Any]) -> None:
    build = make_tuned(jit_settings, dataclasses.replace(baseline_builds[0]))
    assert build.key.hex == build.tuned_key.hex != build.baseline_key.hex


def test_the_jit_example_bench_specs_compile_to_the_shipped_cubins(jit_settings: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuner measures what the spec launches: it must be the very kernel the package ships."""
    import tempfile

    from runtime_helpers import JIT_EXAMPLE
    from triton import knobs

    from kbuild.bench.spec import compile_spec, load_spec, validate_inputs, validate_spec
    from kbuild.build.pipeline import run_pipeline

    monkeypatch.syspath_prepend(str(JIT_EXAMPLE))
    shipped = {b.spec.name: b.shipped.cubin for b in run_pipeline(jit_settings, targets=["sm_90"])}
    for decl in jit_settings.kernels:
        assert decl.bench == f"kbx_jit.bench:{decl.name}"
        spec = load_spec(decl.bench, small=True)
        validate_spec(spec)
        validate_inputs(spec, spec.make_inputs(0, "cpu"))
        with tempfile.TemporaryDirectory() as tmp, knobs.compilation.scope(), knobs.cache.scope():
            knobs.compilation.disable_line_info = True
            knobs.cache.dir = tmp
            compiled = compile_spec(spec, spec.configs[0], 90)
        assert compiled.asm["cubin"] == shipped[decl.name], decl.name


# ---- a damaged or hostile index (issue 13): IndexFormatError naming the file and the key; the package
# imports with Triton's own cubins and a warning.

def _damaged(doc: dict[str, Any], how: str) -> bytes:
    key = next(iter(doc["entries"]))
    if how == "nested":
        return json.dumps(doc).encode()[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    if how == "cubin-int":
        doc["entries"][key]["cubin"] = 12
    elif how == "components-list":
        doc["entries"][key]["key_components"] = [1]
    elif how == "tuned-str":
        doc["entries"][key]["tuned"] = "yes"
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("how", "fragment"), [
    pytest.param("nested", "nested deeper than", id="nested",
                 marks=pytest.mark.hostile(fault="deeply nested JSON", outcome="degraded with warning")),
    pytest.param("cubin-int", ".cubin: expected str, got int", id="cubin-int",
                 marks=pytest.mark.hostile(fault="malformed package index", outcome="degraded with warning")),
    pytest.param("components-list", ".key_components: expected dict, got list", id="components-list",
                 marks=pytest.mark.hostile(fault="malformed package index", outcome="degraded with warning")),
    pytest.param("tuned-str", ".tuned: expected bool, got str", id="tuned-str",
                 marks=pytest.mark.hostile(fault="malformed package index", outcome="degraded with warning")),
])
def test_a_damaged_index_is_a_clean_error_and_enable_degrades(jit_settings: Any, tuned_builds: list[Any],
                                                              tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              how: str, fragment: str) -> None:
    from kbuild.runtime.index import IndexFormatError

    result = write_package_data(jit_settings, tuned_builds, tmp_path / "kbx_jit")
    path = result.data_dir / INDEX_FILE
    path.write_bytes(_damaged(json.loads(path.read_text()), how))
    with pytest.raises(IndexFormatError) as err:
        load_index(path)
    assert str(err.value).startswith(f"{path}: ") and fragment in str(err.value)
    with caplog.at_level("WARNING", logger="kbuild"):
        assert kbuild.runtime.enable("kbx_jit", data_dir=result.data_dir) is False
    assert f"ignoring the tuned cubins of kbx_jit: {path}: " in caplog.text


@pytest.mark.hostile(fault="full disk", outcome="clean error")
def test_a_failed_rewrite_keeps_the_old_index_and_every_cubin_it_names(jit_settings: Any, tuned_builds: list[Any],
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import kbuild.build.package_data as package

    first = write_package_data(jit_settings, tuned_builds[:1], tmp_path / "kbx_jit")
    real = package.write_atomic

    def full_at_index(path: Any, data: Any, **kw: Any) -> Any:
        if Path(path).name == INDEX_FILE:
            raise OSError(28, "No space left on device")
        return real(path, data, **kw)

    monkeypatch.setattr(package, "write_atomic", full_at_index)
    with pytest.raises(OSError):
        write_package_data(jit_settings, tuned_builds[1:], tmp_path / "kbx_jit")
    index = load_index(first.data_dir / INDEX_FILE)
    assert index.entries == first.index["entries"]
    for entry in index.entries.values():
        assert (first.data_dir / entry["cubin"]).is_file()
