"""Property tests of the settings model (issue 13): any ``[tool.kbuild]`` table, any pyproject.toml bytes and
any ``KBUILD_*`` environment give Settings or one ConfigError (exit 2) naming the file or variable — never
another exception — and ``kbuild compile --config`` on such a file exits 0 or 2 without a traceback.

The tables are TOML-like data: nested tables and arrays of strings (any Unicode), integers, floats (nan and
inf included), booleans and dates, with the model's own keys mixed with arbitrary ones, so that each check
in :mod:`kbuild.settings` is reached and so is the code past it.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import tomllib
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from property_helpers import mutated, same, toml_document

from kbuild.cli import main
from kbuild.declarations.kernel import KernelSettings
from kbuild.errors import ConfigError
from kbuild.settings.model import BudgetSettings, RemoteSettings, Settings
from kbuild.settings.sources import load_settings, settings_from_table
from kbuild.settings.variables import Override, variables

WHERE = "pp/pyproject.toml"
SETTINGS_KEYS = [f.name for f in dataclasses.fields(Settings) if not f.metadata.get("internal")]
KERNEL_KEYS = [f.name for f in dataclasses.fields(KernelSettings)]
ENV_VARS = sorted(f.metadata["env"] for cls in (Settings, BudgetSettings, KernelSettings, RemoteSettings)
                  for f in dataclasses.fields(cls) if f.metadata.get("env"))

# --- strategies ---------------------------------------------------------------------------------

text = st.text(max_size=12)
keys = st.sampled_from(["a", "name", "x", "BLOCK", "sm_90", "url", "-", "a b", "ñ", "\x1b[31m", "a\nb", ""]) | text
floats = st.floats() | st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308])
integers = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 1, 2, 3, 4, 8, 32, 64, 2**31])
scalars = text | integers | floats | st.booleans() | st.dates()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=10)

targets = st.lists(st.sampled_from(["sm_80", "sm_90", "sm_90a", "90", "sm_75", "sm_99", "sm_80a", "sm_９０", "sm_٩٠",
                                    "", " sm_90 ", "SM_120"]) | text, max_size=4)
identifiers = st.sampled_from(["x", "x_ptr", "n", "N", "BLOCK", "r", "int", "_", "ñ", "x y", "", "1x"]) | text
triton_types = st.sampled_from(["*fp16", "*fp32:16", "i32", "i64:16", "fp32", "*float", "", "i32:8", "*kfp16"]) | text
sources = st.sampled_from(["pkg.mod:add", "tiny_kernels:copy", "tiny_kernels:missing", "tiny_kernels:NOT_JIT",
                           "no_such_module_kbuild:fn", "nocolon", ":fn", "a.:b", "a:b:c", "ñ.mod:fn", ""])


def plausible_kernel() -> st.SearchStrategy[dict[str, Any]]:
    plausible = {
        "name": identifiers | values, "source": sources | values, "bench": sources | values,
        "signature": st.dictionaries(identifiers, triton_types, max_size=3) | values,
        "constexprs": st.dictionaries(identifiers, scalars, max_size=3) | values,
        "num_warps": integers | values, "num_stages": integers | values,
    }
    return st.fixed_dictionaries({}, optional=plausible) | st.dictionaries(st.sampled_from(KERNEL_KEYS) | keys, values,
                                                                              max_size=4)


def plausible_table() -> st.SearchStrategy[dict[str, Any]]:
    plausible = {
        "targets": targets | values,
        "kernels": st.lists(plausible_kernel(), max_size=3) | values,
        "store": st.sampled_from(["", " ", ".", "build/store", "~/x", "/tmp/x\x00y", "a\nb"]) | values,
        "store_max_bytes": integers | values,
        "remotes": st.lists(st.fixed_dictionaries({}, optional={"url": text | values, "writable": st.booleans() | values}),
                            max_size=2) | values,
        "tune": st.sampled_from(["off", "auto", "require", "sometimes", ""]) | values,
        "algorithm": st.sampled_from(["ppo", "random", "greedy", "PPO"]) | values,
        "budget": st.fixed_dictionaries({}, optional={"evaluations": integers | values, "seconds": floats | integers | values})
                  | values,
        "seed": integers | values,
        "python_path": st.lists(st.sampled_from([".", "src", "", "\x00", "../..", "/"]) | text, max_size=3) | values,
        "ship": st.sampled_from(["extension", "package-data", "wheel"]) | values,
        "store_secret": text,
    }
    known = st.fixed_dictionaries({}, optional={k: v for k, v in plausible.items() if k in SETTINGS_KEYS})
    extra = st.dictionaries(keys, values, max_size=2)
    return st.builds(lambda a, b, hyphen: {**b, **({k.replace("_", "-"): v for k, v in a.items()} if hyphen else a)},
                     known, extra, st.booleans())


#: A valid table for the tiny kernel below; mutated, it reaches the checks past the first few.
VALID = {"targets": ["sm_80"], "kernels": [
    {"name": "copy", "source": "tiny_kernels:copy", "signature": {"x_ptr": "*fp32:16", "y_ptr": "*fp16", "n": "i32"},
     "constexprs": {"BLOCK": 128}, "num_warps": 4, "num_stages": 3}]}


def tables() -> st.SearchStrategy[dict[str, Any]]:
    return plausible_table() | mutated(VALID, values | plausible_kernel() | targets).filter(
        lambda t: isinstance(t, dict))


def environments(names: list[str] = ENV_VARS) -> st.SearchStrategy[dict[str, str]]:
    """What a process environment can hold: no NUL, and the only surrogates are those Python makes of bytes
    that are not UTF-8 (``surrogateescape``, U+DC80..U+DCFF)."""
    return st.dictionaries(st.sampled_from(names), st.sampled_from(
        ["", "0", "1", "-1", "nan", "inf", "1e999", "sm_90", ",", "sm_90,sm_99", "off", "ppo", "x", "１７", " 17 ", "s",
         "\udcff", "sm_9\udce0"])
        | st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10), max_size=3)


# --- the contract ---------------------------------------------------------------------------------

def check_outcome(call, where: str) -> Settings | None:
    """``call()`` gives Settings, or a ConfigError naming ``where`` (or a KBUILD_* variable) in one line."""
    try:
        result = call()
    except ConfigError as exc:
        assert exc.exit_code == 2
        assert exc.where == where or (exc.where == "environment" and exc.key.startswith("KBUILD_")), exc.where
        message = str(exc)
        place = f"environment variable {exc.key}" if exc.where == "environment" else f"{exc.where}: {exc.key}"
        assert message.startswith(f"{place}: "), message
        if exc.where == "environment":  # the variable is named once (was "environment variable X: X: ...")
            assert exc.key.split("[")[0] not in message[len(place):], message
        assert "\n" not in message and "\r" not in message and "\x1b" not in message, repr(message)
        return None
    assert isinstance(result, Settings)
    return result


@pytest.mark.hostile(fault="arbitrary config", outcome="clean error")
@settings(max_examples=400, deadline=None)
@given(tables(), environments())
def test_any_table_gives_settings_or_a_config_error(table: dict[str, Any], environ: dict[str, str]):
    s = check_outcome(lambda: settings_from_table(table, where=WHERE, project_dir=Path("/p"), environ=environ), WHERE)
    if s is not None:  # what passed is what the rest of kbuild may rely on
        assert s.targets and all(isinstance(t, str) and t.isascii() for t in s.targets)
        assert s.budget.evaluations > 0 and 0 < s.budget.seconds < math.inf and s.store_max_bytes > 0
        for k in s.kernels:
            assert all(isinstance(v, (bool, int, float, str)) for v in k.constexprs.values())
            assert all(math.isfinite(v) for v in k.constexprs.values() if isinstance(v, float))


@pytest.mark.hostile(fault="arbitrary config", outcome="clean error")
@settings(max_examples=150, deadline=None)
@given(st.one_of(values, st.lists(plausible_kernel(), max_size=2), st.none()))
def test_any_value_as_the_whole_table_or_the_kernels(value: Any):
    check_outcome(lambda: settings_from_table(value, where=WHERE, environ={}), WHERE)
    check_outcome(lambda: settings_from_table({"kernels": value}, where=WHERE, environ={}), WHERE)


@pytest.mark.hostile(fault="arbitrary config", outcome="clean error")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), environments())
def test_any_pyproject_file_gives_settings_or_a_config_error(table: dict[str, Any], environ: dict[str, str]):
    doc = toml_document(table)
    try:
        parsed = tomllib.loads(doc)["tool"]["kbuild"]
    except tomllib.TOMLDecodeError:  # e.g. a key given twice after the '_' → '-' spelling; not what we test
        assume(False)
    assert same(parsed, table), "the test's TOML writer is wrong"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "pyproject.toml"
        path.write_text(doc, encoding="utf-8")
        check_outcome(lambda: load_settings(path, environ=environ), str(path))


@pytest.mark.hostile(fault="arbitrary config", outcome="clean error")
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(lambda t: ("[tool.kbuild]\n" + t).encode("utf-8", "replace"))
       | st.sampled_from([b"a = " + b"[" * 100_000 + b"]" * 100_000, b"[tool.kbuild]\nseed = " + b"9" * 5000,
                          b"[tool.kbuild]\nx = " + b"{a=" * 50_000 + b"1" + b"}" * 50_000, b"\xef\xbb\xbf[tool.kbuild]\n"]))
def test_any_bytes_as_pyproject(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "pyproject.toml"
        path.write_bytes(data)
        check_outcome(lambda: load_settings(path, environ={}), str(path))
        check_outcome(lambda: load_settings(path, environ={}, require_table=False), str(path))


# --- through the CLI ------------------------------------------------------------------------------

TINY_KERNELS = '''
import triton
import triton.language as tl

NOT_JIT = 1


@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pass  # compiles for any parameter types and constexpr values: what fails is the configuration's fault
'''


@pytest.mark.hostile(fault="arbitrary config", outcome="clean error")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
# KBUILD_DEBUG shows tracebacks on purpose; KBUILD_STORE is the temporary store set below.
@given(tables(), environments([v for v in ENV_VARS if v not in ("KBUILD_STORE", "KBUILD_DEBUG")]))
def test_compile_on_any_pyproject_exits_0_or_2(capsys, table: dict[str, Any], environ: dict[str, str]):
    doc = toml_document(table)
    try:
        tomllib.loads(doc)
    except tomllib.TOMLDecodeError:
        assume(False)
    field_of = {var: name for name, var in variables().items()}
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp, Override() as env:
        project = Path(d) / "project"
        project.mkdir()
        (project / "pyproject.toml").write_text(doc, encoding="utf-8")
        (project / "tiny_kernels.py").write_text(TINY_KERNELS)
        store = Path(d) / "store"
        env.set(store=store, targets="sm_80")  # one target at most: a valid example compiles once
        env.set({field_of[name]: value for name, value in environ.items()})
        mp.setenv("HOME", d)  # so that store = "~/x" stays inside the temporary directory too
        mp.chdir(d)
        capsys.readouterr()
        code = main(["compile", "--config", str(project / "pyproject.toml"), "--json", "--no-progress"])
        out, err = capsys.readouterr()
        event(f"exit {code}")
        assert code in (0, 2), err
        assert "Traceback" not in err
        if code == 2:
            assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
            assert not store.exists()
