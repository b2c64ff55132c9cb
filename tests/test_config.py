"""The settings model: valid input, each class of invalid input, environment overrides, schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import ConfigError
from kbuild.schema import json_schema
from kbuild.settings.fields import key_fields
from kbuild.settings.model import Settings, default_store_path
from kbuild.settings.sources import load_settings, settings_from_table

ROOT = Path(__file__).resolve().parent.parent

KERNEL = {"name": "add", "source": "pkg.mod:add", "signature": {"x": "*fp32:16", "n": "i32"},
          "constexprs": {"BLOCK": 1024}}


def table(**extra):
    return {"kernels": [dict(KERNEL)], **extra}


def test_defaults_and_valid_table():
    s = settings_from_table(table(), project_dir=Path("/p"), environ={})
    assert s.targets == ["sm_80", "sm_90"]
    assert s.tune == "auto"
    assert s.budget.evaluations == 200
    k = s.kernels[0]
    assert (k.name, k.module, k.function, k.num_warps, k.num_stages) == ("add", "pkg.mod", "add", 4, 3)
    assert s.kernel("add") is k


def test_example_project_loads():
    s = load_settings(ROOT / "examples" / "cmake-extension" / "pyproject.toml", environ={})
    assert [k.name for k in s.kernels] == ["matmul_leaky_relu", "softmax", "layernorm"]


@pytest.mark.parametrize(
    ("tbl", "key", "fragment"),
    [
        ({"kernels": [{**KERNEL, "signature": "x"}]}, "[tool.kbuild.kernels][0].signature", "expected a table"),
        ({"kernels": [{**KERNEL, "signature": {"x": "*float"}}]}, "[tool.kbuild.kernels][0].signature.x", "not a Triton type"),
        ({"kernels": [{**KERNEL, "num_warps": "4"}]}, "[tool.kbuild.kernels][0].num_warps", "expected an integer"),
        ({"kernels": [{**KERNEL, "num_warps": 3}]}, "[tool.kbuild.kernels][0].num_warps", "power of two"),
        ({"kernels": [{**KERNEL, "source": "nocolon"}]}, "[tool.kbuild.kernels][0].source", "package.module:function"),
        ({"kernels": [{**KERNEL, "nme": "x"}]}, "[tool.kbuild.kernels][0].nme", "did you mean 'name'"),
        ({"kernels": [{k: v for k, v in KERNEL.items() if k != "source"}]}, "[tool.kbuild.kernels][0].source", "required"),
        ({"kernels": [KERNEL, KERNEL]}, "[tool.kbuild.kernels][1].name", "duplicate"),
        ({"kernels": [{**KERNEL, "constexprs": {"x": 1}}]}, "[tool.kbuild.kernels][0].constexprs.x", "both"),
        (table(targets=["sm_99"]), "targets[0]", "unsupported target"),
        (table(targets="sm_90"), "targets", "expected an array"),
        (table(tune="sometimes"), "tune", "expected one of"),
        (table(tunes="auto"), "tunes", "did you mean 'tune'"),
        (table(budget={"evaluations": 0}), "budget.evaluations", "must be positive"),
        (table(budget={"evaluation": 10}), "budget.evaluation", "did you mean 'evaluations'"),
        (table(store_secret="hunter2"), "store_secret", "KBUILD_STORE_SECRET"),
        (table(remotes=[{"writable": True}]), "remotes[0].url", "required"),
    ],
)
def test_invalid_tables_name_file_and_key(tbl, key, fragment):
    with pytest.raises(ConfigError) as err:
        settings_from_table(tbl, where="pyproject.toml", environ={})
    assert err.value.key == key
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"pyproject.toml: {key}: ")
    assert err.value.exit_code == 2


def test_bad_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="no such file"):
        load_settings(tmp_path / "missing.toml")
    bad = tmp_path / "pyproject.toml"
    bad.write_text("[tool.kbuild\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(bad)
    bad.write_text("[project]\nname='x'\n")
    with pytest.raises(ConfigError, match=r"\[tool.kbuild\]: table is missing"):
        load_settings(bad)


def test_environment_overrides_pyproject():
    env = {"KBUILD_STORE": "/tmp/s", "KBUILD_TARGETS": "sm_90, sm_80", "KBUILD_TUNE": "off",
           "KBUILD_BUDGET_EVALUATIONS": "17", "KBUILD_STORE_SECRET": "s3cret"}
    s = settings_from_table(table(tune="require"), environ=env)
    assert s.store_path == Path("/tmp/s")
    assert s.targets == ["sm_90", "sm_80"]
    assert s.tune == "off"
    assert s.budget.evaluations == 17
    assert s.store_secret == "s3cret"


def test_bad_environment_value_names_the_variable():
    with pytest.raises(ConfigError) as err:
        settings_from_table(table(), environ={"KBUILD_BUDGET_EVALUATIONS": "many"})
    assert "KBUILD_BUDGET_EVALUATIONS" in str(err.value)
    with pytest.raises(ConfigError, match="expected one of"):
        settings_from_table(table(), environ={"KBUILD_TUNE": "maybe"})


def test_relative_store_is_taken_from_the_project_dir():
    s = settings_from_table(table(store="build/store"), project_dir=Path("/proj"), environ={})
    assert s.store_path == Path("/proj/build/store")


def test_key_fields_are_declared_in_the_model():
    assert set(key_fields(KernelSettings)) == {"signature", "constexprs", "num_warps", "num_stages"}
    assert set(key_fields(Settings)) == {"algorithm", "kinds", "seed"}


def test_committed_schema_matches_the_model():
    committed = json.loads((ROOT / "kbuild" / "schema" / "kbuild.schema.json").read_text())
    assert committed == json_schema(), "run: python -m kbuild.schema > kbuild/schema/kbuild.schema.json"
    assert committed["properties"]["kernels"]["items"]["properties"]["num_warps"]["description"]


# ----------------------------------------------------------------------------------------------
# Hostile input (issue 13): each is one ConfigError naming the file and the key, exit status 2.

KERNEL_TOML = '[[tool.kbuild.kernels]]\nname = "add"\nsource = "pkg.mod:add"\nsignature = { x = "*fp32:16" }\n'


def write_pyproject(tmp_path: Path, body: str | bytes) -> Path:
    path = tmp_path / "pyproject.toml"
    if isinstance(body, str):
        path.write_text(body, encoding="utf-8")
    else:
        path.write_bytes(body)
    return path


def config_error(path: Path, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ=environ or {})
    assert err.value.exit_code == 2
    assert "\n" not in str(err.value)
    return err.value


@pytest.mark.hostile(fault="non-finite number", outcome="clean error")
@pytest.mark.parametrize(("body", "key"), [
    pytest.param("[tool.kbuild]\nbudget = { seconds = nan }\n", "budget.seconds", id="seconds=nan"),
    pytest.param("[tool.kbuild]\nbudget = { seconds = inf }\n", "budget.seconds", id="seconds=inf"),
    pytest.param("[tool.kbuild]\nbudget = { seconds = -inf }\n", "budget.seconds", id="seconds=-inf"),
    pytest.param("[tool.kbuild.budget]\nseconds = +nan\n", "budget.seconds", id="seconds=+nan"),
    pytest.param(KERNEL_TOML + "constexprs = { SCALE = nan }\n", "[tool.kbuild.kernels][0].constexprs.SCALE",
                 id="constexpr=nan"),
    pytest.param(KERNEL_TOML + "constexprs = { SCALE = inf }\n", "[tool.kbuild.kernels][0].constexprs.SCALE",
                 id="constexpr=inf"),
    pytest.param(KERNEL_TOML + "constexprs = { SCALE = -inf }\n", "[tool.kbuild.kernels][0].constexprs.SCALE",
                 id="constexpr=-inf"),
])
def test_non_finite_numbers_in_pyproject(tmp_path: Path, body: str, key: str):
    path = write_pyproject(tmp_path, body)
    err = config_error(path)
    assert err.key == key
    assert str(err).startswith(f"{path}: {key}: non-finite number")


@pytest.mark.hostile(fault="non-finite number", outcome="clean error")
@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "Infinity", "1e999"])
def test_non_finite_budget_seconds_from_the_environment(tmp_path: Path, raw: str):
    path = write_pyproject(tmp_path, KERNEL_TOML)
    err = config_error(path, {"KBUILD_BUDGET_SECONDS": raw})
    assert err.key == "KBUILD_BUDGET_SECONDS"
    assert "non-finite number" in str(err)


@pytest.mark.hostile(fault="unreadable config", outcome="clean error")
@pytest.mark.parametrize("body", [
    pytest.param(b"[tool.kbuild]\n# caf\xe9 (latin-1)\n", id="latin-1"),
    pytest.param(b"\xff\xfe[\x00t\x00o\x00o\x00l\x00]\x00", id="utf-16"),
    pytest.param(b"[tool.kbuild]\ntargets = [\"sm_90\xc0\"]\n", id="truncated-sequence"),
])
def test_non_utf8_pyproject(tmp_path: Path, body: bytes):
    path = write_pyproject(tmp_path, body)
    err = config_error(path)
    assert err.key == "(file)"
    assert str(err).startswith(f"{path}: (file): not UTF-8 text")


@pytest.mark.hostile(fault="wrong config shape", outcome="clean error")
@pytest.mark.parametrize(("body", "key"), [
    pytest.param("tool = 1\n", "tool", id="tool=1"),
    pytest.param("tool = [1, 2]\n", "tool", id="tool=array"),
    pytest.param('tool = "kbuild"\n', "tool", id="tool=string"),
    pytest.param("[tool]\nkbuild = 1\n", "[tool.kbuild]", id="kbuild=1"),
    pytest.param("[tool]\nkbuild = []\n", "[tool.kbuild]", id="kbuild=array"),
    pytest.param("[[tool.kbuild]]\ntune = 'off'\n", "[tool.kbuild]", id="kbuild=array-of-tables"),
    pytest.param("[tool.kbuild]\nkernels = {}\n", "[tool.kbuild.kernels]", id="kernels=table"),
    pytest.param("[tool.kbuild]\nkernels = 1\n", "[tool.kbuild.kernels]", id="kernels=1"),
    pytest.param("[tool.kbuild]\nkernels = [1]\n", "[tool.kbuild.kernels][0]", id="kernels=[1]"),
    pytest.param("[tool.kbuild]\nbudget = 1\n", "budget", id="budget=1"),
    pytest.param("[tool.kbuild]\nremotes = { url = 'http://x' }\n", "remotes", id="remotes=table"),
    pytest.param("[tool.kbuild]\nremotes = ['http://x']\n", "remotes[0]", id="remotes=[str]"),
    pytest.param("[tool.kbuild]\ntargets = [['sm_90']]\n", "targets[0]", id="targets=nested"),
    pytest.param(KERNEL_TOML.replace("signature = { x = \"*fp32:16\" }", "signature = ['*fp32']"),
                 "[tool.kbuild.kernels][0].signature", id="signature=array"),
    pytest.param(KERNEL_TOML + "constexprs = 1\n", "[tool.kbuild.kernels][0].constexprs", id="constexprs=1"),
    pytest.param(KERNEL_TOML + "constexprs = { BLOCK = [1] }\n", "[tool.kbuild.kernels][0].constexprs.BLOCK",
                 id="constexpr=array"),
    pytest.param(KERNEL_TOML + "constexprs = { BLOCK = { a = 1 } }\n", "[tool.kbuild.kernels][0].constexprs.BLOCK",
                 id="constexpr=table"),
    pytest.param(KERNEL_TOML + "constexprs = { BLOCK = 1979-05-27 }\n", "[tool.kbuild.kernels][0].constexprs.BLOCK",
                 id="constexpr=date"),
])
def test_wrong_config_shape(tmp_path: Path, body: str, key: str):
    path = write_pyproject(tmp_path, body)
    err = config_error(path)
    assert err.key == key
    assert str(err).startswith(f"{path}: {key}: expected ")


@pytest.mark.hostile(fault="empty targets", outcome="clean error")
@pytest.mark.parametrize(("body", "environ", "where", "key"), [
    pytest.param("[tool.kbuild]\ntargets = []\n", {}, None, "targets", id="pyproject"),
    pytest.param("[tool.kbuild]\n", {"KBUILD_TARGETS": ","}, "environment", "KBUILD_TARGETS",
                 id="KBUILD_TARGETS=,"),
    pytest.param("[tool.kbuild]\n", {"KBUILD_TARGETS": " , ,"}, "environment", "KBUILD_TARGETS",
                 id="KBUILD_TARGETS=spaces"),
])
def test_empty_targets(tmp_path: Path, body: str, environ: dict[str, str], where: str | None, key: str):
    path = write_pyproject(tmp_path, body)
    err = config_error(path, environ)
    assert (err.where, err.key) == (where or str(path), key)
    assert "no targets" in err.detail


def test_a_bad_environment_value_is_blamed_on_the_variable_not_the_file(tmp_path: Path):
    path = write_pyproject(tmp_path, "[tool.kbuild]\n")
    err = config_error(path, {"KBUILD_TARGETS": "sm_90,sm_99"})
    assert (err.where, err.key) == ("environment", "KBUILD_TARGETS[1]")
    err = config_error(path, {"KBUILD_BUDGET_EVALUATIONS": "0"})
    assert (err.where, err.key) == ("environment", "KBUILD_BUDGET_EVALUATIONS")
    # ... and a valid variable does not excuse an invalid file.
    path = write_pyproject(tmp_path, "[tool.kbuild]\ntargets = []\n")
    err = config_error(path, {"KBUILD_TARGETS": "sm_90"})
    assert (err.where, err.key) == (str(path), "targets")


@pytest.mark.hostile(fault="home directory of an unknown user", outcome="clean error")
def test_tilde_of_an_unknown_user_is_a_config_error_not_a_crash(tmp_path: Path):
    # Found by CI's hypothesis run: KBUILD_CUOBJDUMP='~0' made pathlib raise RuntimeError.
    path = write_pyproject(tmp_path, '[tool.kbuild]\nstore = "~kbuild-no-such-user/store"\n')
    err = config_error(path)
    assert (err.where, err.key) == (str(path), "store")
    assert "~kbuild-no-such-user" in str(err)
    err = config_error(write_pyproject(tmp_path, "[tool.kbuild]\n"), {"KBUILD_CUOBJDUMP": "~0"})
    assert (err.where, err.key) == ("environment", "KBUILD_CUOBJDUMP")


@pytest.mark.hostile(fault="bad store path", outcome="clean error")
@pytest.mark.parametrize("value", [pytest.param('""', id="empty"), pytest.param('"  "', id="blank"),
                                   pytest.param('"a\\u0000b"', id="nul")])
def test_store_that_would_land_in_the_project_root_or_nowhere(tmp_path: Path, value: str):
    path = write_pyproject(tmp_path, f"[tool.kbuild]\nstore = {value}\n")
    err = config_error(path)
    assert (err.where, err.key) == (str(path), "store")


def test_empty_environment_variables_count_as_unset(tmp_path: Path):
    """Documented choice: KBUILD_STORE="" (a CI variable that expanded to nothing) means "not set" — the
    pyproject value or the per-user default — like every empty KBUILD_* variable; never the current directory."""
    path = write_pyproject(tmp_path, "[tool.kbuild]\n")
    s = load_settings(path, environ={"KBUILD_STORE": ""})
    assert s.store is None
    assert s.store_path.is_absolute() and s.store_path != tmp_path
    path = write_pyproject(tmp_path, "[tool.kbuild]\nstore = 'build/store'\n")
    s = load_settings(path, environ={"KBUILD_STORE": "", "KBUILD_TARGETS": "", "KBUILD_BUDGET_SECONDS": ""})
    assert s.store_path == tmp_path / "build" / "store"
    assert s.targets == ["sm_80", "sm_90"] and s.budget.seconds == 600.0


@pytest.mark.hostile(fault="bad store path", outcome="clean error")
def test_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", ".")
    assert default_store_path() == tmp_path / "home" / ".cache" / "kbuild"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "kbuild"


@pytest.mark.hostile(fault="type not on target", outcome="clean error")
@pytest.mark.parametrize(("targets", "environ"), [('["sm_80", "sm_90"]', {}), ('["sm_90"]', {"KBUILD_TARGETS": "sm_75"})])
def test_fp8e4nv_needs_sm89(tmp_path: Path, targets: str, environ: dict[str, str]):
    """Found by the property test: Triton refuses fp8e4nv before sm_89 with a compile error (exit 3) that
    blames the kernel; it is the configuration's combination of a type and a target."""
    path = write_pyproject(tmp_path, f"[tool.kbuild]\ntargets = {targets}\n" + KERNEL_TOML.replace('"*fp32:16"', '"*fp8e4nv"'))
    err = config_error(path, environ)
    assert err.key == "[tool.kbuild.kernels][0].signature.x"
    assert "not supported on sm_" in err.detail and "sm_89" in err.detail
    path = write_pyproject(tmp_path, '[tool.kbuild]\ntargets = ["sm_89", "sm_90"]\n' + KERNEL_TOML.replace('"*fp32:16"', '"*fp8e4nv"'))
    assert load_settings(path, environ={}).kernels[0].signature == {"x": "*fp8e4nv"}
