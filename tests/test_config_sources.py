"""The settings model owns every input (issue 14): one source chain (pyproject.toml < PEP 517 config settings
< environment < command-line flags), one string-to-bool rule whose errors name the variable or key, every
knob in the model and the schema, and no module outside kbuild/settings/ reading a ``KBUILD_*`` variable."""

from __future__ import annotations

import ast
import dataclasses
import json
import logging
import os
from pathlib import Path

import pytest

from kbuild.errors import ConfigError, MissingDependencyError
from kbuild.settings.environ import FALSE_WORDS, TRUE_WORDS, env_flag, parse_bool
from kbuild.settings.model import BudgetSettings, PrewarmSettings, Settings
from kbuild.settings.sources import apply_flags, load_settings, settings_from_table
from kbuild.settings.variables import Override, env_setting, variables

ROOT = Path(__file__).resolve().parent.parent
KERNEL = {"name": "add", "source": "pkg.mod:add", "signature": {"x": "*fp32:16", "n": "i32"}}


def settings(toml: dict | None = None, *, config: dict | None = None, env: dict | None = None) -> Settings:
    return settings_from_table({"kernels": [dict(KERNEL)], **(toml or {})}, where="pyproject.toml",
                               config_settings=config, environ=env or {})


# ---------------------------------------------------------------------------------------------
# The chain.

@pytest.mark.parametrize(("field", "toml", "config", "env", "flag"), [
    ("locked", True, "false", "1", None),
    ("strict", False, "on", "off", True),
    ("tune", "off", "auto", "require", None),
])
def test_each_source_beats_the_ones_before_it(field: str, toml: object, config: str, env: str, flag: object):
    var = Settings.__dataclass_fields__[field].metadata["env"]
    from_toml = settings({field: toml})
    with_config = settings({field: toml}, config={f"kbuild.{field}": config})
    with_env = settings({field: toml}, config={f"kbuild.{field}": config}, env={var: env})
    assert getattr(from_toml, field) == toml
    assert getattr(with_config, field) == (parse_bool(config) if isinstance(toml, bool) else config)
    assert getattr(with_env, field) == (parse_bool(env) if isinstance(toml, bool) else env)
    if flag is not None:  # a command-line flag beats the environment
        assert getattr(apply_flags(with_env, **{field: flag}), field) == flag
    assert apply_flags(with_env, **{field: None}) == with_env  # a flag not given changes nothing


def test_config_settings_reach_nested_tables_lists_and_dashed_names():
    s = settings(config={"kbuild.budget.seconds": "60", "kbuild.store-max-bytes": "4096",
                         "kbuild.targets": ["sm_90", "sm_80"], "kbuild.tune": ["off", "require"],
                         "kbuild.store": "", "cmake.define.FOO": "1", "other.key": "x"})
    assert s.budget.seconds == 60.0 and s.budget.evaluations == 200
    assert s.store_max_bytes == 4096
    assert s.targets == ["sm_90", "sm_80"]  # a repeated key: every value for a list setting
    assert s.tune == "require"  # ... the last one for any other
    assert s.store is None  # an empty value counts as unset, as in the environment


def test_load_settings_takes_config_settings_and_a_document_read_once(tmp_path: Path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.kbuild]\ntargets = ["sm_80"]\n')
    s = load_settings(path, environ={}, config_settings={"kbuild.locked": "yes"})
    assert s.locked and s.targets == ["sm_80"]
    path.unlink()  # the backend passes the document it read: the file is not read again
    s = load_settings(path, environ={}, document={"tool": {"kbuild": {"targets": ["sm_90"]}}})
    assert s.targets == ["sm_90"] and s.project_dir == tmp_path


@pytest.mark.hostile(fault="unknown setting", outcome="clean error")
@pytest.mark.parametrize(("key", "message"), [
    ("kbuild.lockd", "unknown setting; did you mean 'kbuild.locked'?"),
    ("kbuild.budget.secs", "unknown setting; did you mean 'kbuild.budget.seconds'?"),
    ("kbuild.ptxas", "environment only: set KBUILD_PTXAS instead"),
    ("kbuild.store_secret", "environment only: set KBUILD_STORE_SECRET instead"),
    ("kbuild.kernels", "tables cannot be given as config settings"),
    ("kbuild.project_dir", "unknown setting"),
])
def test_a_config_setting_kbuild_cannot_take_is_named(key: str, message: str):
    with pytest.raises(ConfigError) as err:
        settings(config={key: "x"})
    assert (err.value.where, err.value.key) == ("config-settings", key)
    assert message in err.value.detail


@pytest.mark.hostile(fault="environment-only setting in pyproject", outcome="clean error")
@pytest.mark.parametrize(("key", "var"), [("ptxas", "KBUILD_PTXAS"), ("nvdisasm", "KBUILD_NVDISASM"),
                                          ("cuobjdump", "KBUILD_CUOBJDUMP"), ("debug", "KBUILD_DEBUG"),
                                          ("runtime", "KBUILD_RUNTIME")])
def test_environment_only_settings_are_refused_in_pyproject(key: str, var: str):
    with pytest.raises(ConfigError) as err:
        settings({key: "/usr/bin/x" if key in ("ptxas", "nvdisasm", "cuobjdump") else True})
    assert (err.value.where, err.value.key) == ("pyproject.toml", key)
    assert f"set {var} in the environment" in err.value.detail


def test_environment_only_settings_come_from_the_environment():
    s = settings(env={"KBUILD_PTXAS": "/opt/cuda/bin/ptxas", "KBUILD_DEBUG": "Yes", "KBUILD_RUNTIME": "OFF"})
    assert (s.ptxas, s.nvdisasm, s.debug, s.runtime) == (Path("/opt/cuda/bin/ptxas"), None, True, False)
    assert env_setting("nvdisasm", {"KBUILD_NVDISASM": "/x/nvdisasm"}) == Path("/x/nvdisasm")
    assert env_setting("runtime", {}) is True and env_setting("debug", {"KBUILD_DEBUG": ""}) is False


# ---------------------------------------------------------------------------------------------
# The one bool rule.

@pytest.mark.parametrize("word", [*TRUE_WORDS, *FALSE_WORDS, "TRUE", "Yes", "oN", "OFF", "No", " false "])
def test_the_bool_rule_accepts_its_words_in_any_case_everywhere(word: str):
    expected = word.strip().lower() in TRUE_WORDS
    assert parse_bool(word) is expected
    assert env_flag("KBUILD_LOCKED", {"KBUILD_LOCKED": word}) is expected
    assert settings(env={"KBUILD_STRICT": word}).strict is expected
    assert settings(config={"kbuild.locked": word}).locked is expected
    assert env_setting("runtime", {"KBUILD_RUNTIME": word}) is expected


@pytest.mark.hostile(fault="bad boolean", outcome="clean error")
@pytest.mark.parametrize("raw", ["y", "n", "2", "-1", "enable", "disabled", "tru", "on off", "ja"])
@pytest.mark.parametrize("var", ["KBUILD_LOCKED", "KBUILD_STRICT", "KBUILD_DEBUG", "KBUILD_RUNTIME"])
def test_anything_else_is_an_error_naming_the_variable(raw: str, var: str):
    name = var.removeprefix("KBUILD_").lower()
    for read in (lambda: settings(env={var: raw}), lambda: env_setting(name, {var: raw}),
                 lambda: env_flag(var, {var: raw})):
        with pytest.raises(ConfigError) as err:
            read()
        assert (err.value.where, err.value.key) == ("environment", var)
        assert repr(raw) in err.value.detail and "expected a boolean" in err.value.detail


@pytest.mark.hostile(fault="bad boolean", outcome="clean error")
def test_a_bad_boolean_config_setting_names_the_key():
    with pytest.raises(ConfigError) as err:
        settings(config={"kbuild.strict": "sure"})
    assert (err.value.where, err.value.key) == ("config-settings", "kbuild.strict")


# ---------------------------------------------------------------------------------------------
# Where the process-wide knobs are read.

@pytest.mark.hostile(fault="bad boolean", outcome="clean error")
def test_the_cli_names_a_bad_kbuild_debug(kbuild_env: Override, capsys: pytest.CaptureFixture[str]):
    from hostile_helpers import assert_clean_error

    from kbuild.cli import main

    kbuild_env.set(debug="verbose")
    code = main([])
    assert_clean_error(code, capsys.readouterr().err, names=["environment variable KBUILD_DEBUG"])


@pytest.mark.hostile(fault="bad boolean", outcome="degraded with warning")
def test_the_runtime_hook_stays_off_with_one_warning_on_a_bad_value(kbuild_env: Override,
                                                                    caplog: pytest.LogCaptureFixture):
    from kbuild.runtime import reset_events, runtime_disabled

    reset_events()  # forgets what was logged once
    kbuild_env.set(runtime="disabled")
    with caplog.at_level(logging.WARNING, logger="kbuild.runtime"):
        assert runtime_disabled() and runtime_disabled()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "KBUILD_RUNTIME" in warnings[0]
    for value, off in (("off", True), ("0", True), ("NO", True), ("on", False), ("1", False)):
        kbuild_env.set(runtime=value)
        assert runtime_disabled() is off
    kbuild_env.set(runtime=None)
    assert runtime_disabled() is False


def test_tool_overrides_are_the_settings_fields(kbuild_env: Override, tmp_path: Path):
    from kbuild.toolchain import tool_path

    fake = tmp_path / "my-ptxas"
    fake.write_text("#!/bin/sh\n")
    kbuild_env.set(ptxas=fake)
    assert tool_path("ptxas") == fake
    kbuild_env.set(ptxas=tmp_path / "missing")
    with pytest.raises(MissingDependencyError, match="KBUILD_PTXAS="):
        tool_path("ptxas")


# ---------------------------------------------------------------------------------------------
# Every knob in the model and in the schema.

KNOBS = {"KBUILD_DEBUG", "KBUILD_LOCKED", "KBUILD_STRICT", "KBUILD_PTXAS", "KBUILD_NVDISASM", "KBUILD_CUOBJDUMP",
         "KBUILD_RUNTIME"}


def test_every_knob_is_a_settings_field_in_the_committed_schema():
    schema = json.loads((ROOT / "kbuild" / "schema" / "kbuild.schema.json").read_text())
    env = {p["x-env"]: name for name, p in schema["properties"].items() if "x-env" in p}
    assert KNOBS <= set(env)
    for var in KNOBS:
        prop = schema["properties"][env[var]]
        assert prop["description"]
        assert prop.get("x-env-only", False) == (var not in ("KBUILD_LOCKED", "KBUILD_STRICT"))


# ---------------------------------------------------------------------------------------------
# Nobody else reads KBUILD_*.

#: Reads in modules other engineers are changing at the time of writing; each should read a settings field
#: (``settings.ptxas`` ...; ``apply_flags(settings, strict=args.strict)``) and then leave this list.
PENDING: set[str] = set()
ENV_READERS = {"env_value", "env_flag", "getenv"}


def kbuild_env_reads(source: str) -> list[int]:
    """Lines that read a ``KBUILD_*`` variable: ``env_value``/``env_flag``/``getenv`` or ``os.environ`` (``.get``,
    ``[...]``) with a name that is, or is built from, a string holding ``KBUILD_`` (a module constant included)."""
    tree = ast.parse(source)
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
              for t in n.targets if isinstance(t, ast.Name)}

    def mentions(expr: ast.AST) -> bool:
        return any((isinstance(e, ast.Constant) and isinstance(e.value, str) and "KBUILD_" in e.value)
                   or (isinstance(e, ast.Name) and "KBUILD_" in consts.get(e.id, "")) for e in ast.walk(expr))

    def is_environ(expr: ast.AST) -> bool:
        return (isinstance(expr, ast.Attribute) and expr.attr == "environ") or \
            (isinstance(expr, ast.Name) and expr.id in ("environ", "env"))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            env_get = name in ("get", "pop", "setdefault") and isinstance(f, ast.Attribute) and is_environ(f.value)
            if (name in ENV_READERS or env_get) and mentions(node.args[0]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and mentions(node.slice):
            lines.append(node.lineno)
    return lines


def test_the_scanner_finds_each_way_of_reading_a_variable():
    for code in ('env_value("KBUILD_X")', 'env_flag(f"KBUILD_{n}")', 'os.environ.get("KBUILD_X")',
                 'os.environ["KBUILD_X"]', 'os.getenv("KBUILD_X", "")', 'V = "KBUILD_X"\nenv_value(V)'):
        assert kbuild_env_reads(code), code
    for code in ('env_value("TRITON_X")', 'print("KBUILD_X")', 'dict(os.environ)', 'env_setting("ptxas")'):
        assert not kbuild_env_reads(code), code


def test_no_module_but_the_settings_model_reads_kbuild_variables():
    found = {}
    for top in ("kbuild", "hooks", "cache", "templates"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("kbuild/settings/") or rel in PENDING:
                continue
            lines = kbuild_env_reads(path.read_text(encoding="utf-8"))
            if lines:
                found[rel] = lines
    assert found == {}, "read these through kbuild.settings (a settings field, or env_setting)"


# ---------------------------------------------------------------------------------------------
# Settings set for a block (the tests' isolation): every variable the model knows, none kept by hand.

def test_every_variable_of_the_model_is_listed_from_its_fields():
    found = {}
    for cls, above in ((Settings, ""), (BudgetSettings, "budget."), (PrewarmSettings, "prewarm.")):
        found.update({above + f.name: f.metadata["env"] for f in dataclasses.fields(cls) if f.metadata.get("env")})
    assert variables() == found
    assert {"KBUILD_STORE", "KBUILD_RUNTIME_LAUNCH", "KBUILD_PREWARM_ADDRESS", "KBUILD_COMPILE_TIMEOUT"} <= set(found.values())


def test_no_variable_of_the_model_is_set_in_a_test(kbuild_env: Override):
    assert not [var for var in variables().values() if var in os.environ]


def test_an_override_sets_settings_for_a_block_and_puts_every_variable_back(tmp_path: Path):
    with Override(store=tmp_path / "outer", tune="off"):
        with Override({"budget.evaluations": 30, "prewarm.address": "head:6379"}, clear=True, locked=True,
                      kinds=["moves", "far"]) as env:
            assert "KBUILD_TUNE" not in os.environ and "KBUILD_STORE" not in os.environ  # cleared first
            s = settings_from_table({})
            assert (s.budget.evaluations, s.prewarm.address, s.locked, s.kinds) == (30, "head:6379", True,
                                                                                    ["moves", "far"])
            env.set(locked=None, store=tmp_path / "inner")
            os.environ["KBUILD_SEED"] = "7"  # even what the block sets by hand is put back
            s = settings_from_table({})
            assert not s.locked and s.store == tmp_path / "inner" and s.seed == 7
        assert os.environ["KBUILD_STORE"] == str(tmp_path / "outer") and os.environ["KBUILD_TUNE"] == "off"
        assert not [v for v in ("KBUILD_LOCKED", "KBUILD_SEED", "KBUILD_KINDS") if v in os.environ]
    assert not [var for var in variables().values() if var in os.environ]


def test_an_override_names_an_unknown_setting_and_a_bad_value_is_the_variables_error(kbuild_env: Override):
    with pytest.raises(KeyError, match=r"did you mean 'budget\.evaluations'"):
        kbuild_env.set({"budget.evaluation": 3})
    with pytest.raises(KeyError, match="'kernels'"):
        kbuild_env.set(kernels=[])  # a table, not a variable
    kbuild_env.set(seed=-1)  # written as a user would; read by the model's rules
    with pytest.raises(ConfigError, match="environment variable KBUILD_SEED: expected a seed"):
        settings_from_table({})
