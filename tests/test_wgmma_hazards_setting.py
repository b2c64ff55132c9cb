"""``[tool.kbuild] wgmma_hazards``: what a wgmma register race in an sm_90 cubin (kbuild.sass.hazards; Triton 3.6's
pipelining of a wgmma with a register operand, triton-lang/triton#9433) does to ``kbuild compile`` and the build.
``"warn"`` (the default) compiles and records it; ``"error"`` exits 2 naming the file, the key, the kernel, the
target and the race, with nothing stored, whether the racy cubin is compiled now or found in the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbuild.cli import main
from kbuild.errors import ConfigError
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override

# The suite's rmsnorm_swiglu, declared from the installed kbuild as a user's project would (as in test_compile's
# test_a_wgmma_register_race_is_recorded_and_warned); softmax_rows beside it has no wgmma at all.
RACY = ("[[tool.kbuild.kernels]]\nname='rs'\nsource='kbuild.bench.kernels.swiglu:rmsnorm_swiglu'\n"
        "signature={x_ptr='*fp16:16', nw_ptr='*fp16:16', wg_ptr='*fp16:16', wu_ptr='*fp16:16', h_ptr='*fp16:16', "
        "M='i32', N='i32:16', K='i32:16'}\n"
        "constexprs={BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, EPS=1e-6}\nnum_warps=8\nnum_stages=3\n")
CLEAN = ("[[tool.kbuild.kernels]]\nname='sm'\nsource='kbuild.bench.kernels.softmax:softmax_rows'\n"
         "signature={x_ptr='*fp16:16', y_ptr='*fp16:16', n_cols='i32'}\nconstexprs={BLOCK_N=1024}\n")


def project(tmp_path: Path, setting: str | None, kernels: str = CLEAN + RACY, tune: str = "off") -> Path:
    cfg = tmp_path / "pyproject.toml"
    line = f"wgmma_hazards = {setting}\n" if setting is not None else ""
    cfg.write_text(f"[tool.kbuild]\ntargets = ['sm_90']\ntune = '{tune}'\n{line}{kernels}")
    return cfg


def compile_(capsys, cfg: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["compile", "--config", str(cfg), "--no-progress", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_default_is_warn_and_the_environment_overrides_it(tmp_path: Path):
    cfg = project(tmp_path, None)
    assert load_settings(cfg, environ={}).wgmma_hazards == "warn"
    assert load_settings(project(tmp_path, '"error"'), environ={}).wgmma_hazards == "error"
    assert load_settings(cfg, environ={"KBUILD_WGMMA_HAZARDS": "error"}).wgmma_hazards == "error"


def test_a_bad_value_names_the_file_and_the_key(tmp_path: Path, capsys):
    cfg = project(tmp_path, '"eror"')
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, environ={})
    assert info.value.where == str(cfg) and info.value.key == "wgmma_hazards"
    assert "expected one of 'warn', 'error', got 'eror'; did you mean 'error'?" in str(info.value)
    with pytest.raises(ConfigError, match="wgmma_hazards: expected one of 'warn', 'error', got True"):
        load_settings(project(tmp_path, "true"), environ={})
    with pytest.raises(ConfigError, match="KBUILD_WGMMA_HAZARDS: expected one of 'warn', 'error', got 'off'"):
        load_settings(project(tmp_path, None), environ={"KBUILD_WGMMA_HAZARDS": "off"})
    cfg = project(tmp_path, '"fatal"')
    code, _, err = compile_(capsys, cfg)
    assert code == 2 and err.startswith(f"error: {cfg}: wgmma_hazards: expected one of"), err


def test_error_refuses_a_racy_kernel_with_exit_2_and_stores_nothing(tmp_path: Path, capsys, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    cfg = project(tmp_path, '"error"')
    code, out, err = compile_(capsys, cfg, "--out", str(tmp_path / "cubins"), "--json")
    assert code == 2 and out == "", err
    assert err.startswith(f"error: {cfg}: wgmma_hazards: \"error\" refuses kernel 'rs' "
                          "(kbuild.bench.kernels.swiglu:rmsnorm_swiglu) for sm_90: its cubin has a wgmma register race")
    assert "writes an in-flight A fragment" in err and "triton-lang/triton#9433" in err
    assert "KBUILD_WGMMA_HAZARDS" in err and "Traceback" not in err
    # The clean kernel compiled first, but nothing reached the store or the output directory: the next build
    # (under "warn") finds neither kernel stored.
    assert not (tmp_path / "cubins").exists()
    code, out, err = compile_(capsys, project(tmp_path, '"warn"'), "--json")
    assert code == 0, err
    assert {(r["kernel"], r["store_hit"]) for r in json.loads(out)} == {("sm", False), ("rs", False)}


def test_error_refuses_a_racy_cubin_found_in_the_store(tmp_path: Path, capsys, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    cfg = project(tmp_path, None)
    code, out, _ = compile_(capsys, cfg, "--json")  # "warn": today's behaviour, the race recorded
    assert code == 0
    assert {r["kernel"] for r in json.loads(out)} == {"sm", "rs"}
    kbuild_env.set(wgmma_hazards="error")
    code, out, err = compile_(capsys, cfg, "--json")
    assert code == 2 and out == "", err
    assert "wgmma_hazards: \"error\" refuses kernel 'rs'" in err and "for sm_90" in err
    assert "its stored cubin (compiled earlier under \"warn\") has a wgmma register race" in err
    assert "triton-lang/triton#9433" in err and "writes an in-flight A fragment" in err
    kbuild_env.set(wgmma_hazards=None)
    code, out, err = compile_(capsys, cfg, "--json")  # the refusal changed nothing in the store
    assert code == 0 and all(r["store_hit"] for r in json.loads(out)), err


def test_error_builds_a_project_without_a_race(tmp_path: Path, capsys, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    cfg = project(tmp_path, '"error"', kernels=CLEAN)
    code, out, err = compile_(capsys, cfg, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["kernel"], row["target"], row["store_hit"]) == ("sm", "sm_90", False)
    code, out, err = compile_(capsys, cfg, "--json")
    assert code == 0 and json.loads(out)[0]["store_hit"], err


def test_error_refuses_a_tuning_result_whose_configuration_has_a_race(tmp_path: Path, monkeypatch, kbuild_env: Override):
    """A tuner that picks another configuration ships that configuration's compile, race and all: under "error" the
    build stops before the result is stored (the GPU and the tuner faked at the edge, as in tests/hooks)."""
    from kbuild.build import tunable
    from kbuild.build.pipeline import run_pipeline
    from kbuild.build.tuning import tuned_artefact
    from kbuild.cache import Artefact

    kbuild_env.set(store=tmp_path / "store")
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: cc == 90)  # "an sm_90 GPU is here"
    race = "slot 7 (LDSM.16.M88.4 R164, [R230]) writes an in-flight A fragment: R164,R165,R166,R167"
    calls: list[str] = []

    def tuner(settings, b):
        calls.append(b.spec.name)
        other = Artefact.create(key=b.baseline_key.hex, cubin=b.artefact.cubin + b"\0other configuration",
                                meta={**b.artefact.meta, "wgmma_register_hazards": [race]})
        return tuned_artefact(b, other.cubin, accepted=True, speedup=1.2, reason="accepted: fake", base=other)

    kernels = CLEAN + "bench='kbuild.bench.kernels.softmax:softmax'\n"
    with pytest.raises(ConfigError) as info:
        run_pipeline(load_settings(project(tmp_path, '"error"', kernels, tune="auto")), tune_on_miss=True,
                     tuner=tuner)
    assert info.value.key == "wgmma_hazards" and calls == ["sm"]
    assert "refuses kernel 'sm'" in str(info.value) and "the configuration the tuner chose" in str(info.value)
    assert race in str(info.value) and "triton-lang/triton#9433" in str(info.value)
    (b,) = run_pipeline(load_settings(project(tmp_path, None, kernels, tune="auto")), tune_on_miss=True, tuner=tuner)
    assert calls == ["sm", "sm"] and b.improved  # nothing had been stored: tuned again, and shipped under "warn"


def test_error_fails_when_the_check_cannot_run(tmp_path: Path, capsys, kbuild_env: Override):
    """Under "warn" a check that cannot run (here: no nvdisasm) is skipped, as before; under "error" it is an error,
    not a racy kernel let through."""
    kbuild_env.set(store=tmp_path / "store")
    kbuild_env.set(nvdisasm=tmp_path / "no-nvdisasm")
    code, _, err = compile_(capsys, project(tmp_path, '"error"', kernels=RACY))
    assert code == 2, err
    assert "wgmma_hazards: \"error\" needs the wgmma hazard check of kernel 'rs'" in err and "sm_90" in err
    assert "cannot run here" in err and "Traceback" not in err
    code, _, err = compile_(capsys, project(tmp_path, '"warn"', kernels=RACY))
    assert code == 0, err
