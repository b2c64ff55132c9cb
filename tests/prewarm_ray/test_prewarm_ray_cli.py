"""``kbuild prewarm --ray``'s clean errors (exit status 2, one line naming what to do), no cluster needed."""

from __future__ import annotations

from pathlib import Path

import pytest

import kbuild.extras
from kbuild.cli import main
from kbuild.prewarm.ray_engine import model_key, resource_name


def test_without_the_ray_extra_it_names_the_extra(example_project: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    real = kbuild.extras._importable
    monkeypatch.setattr(kbuild.extras, "_importable", lambda n: n != "ray" and real(n))
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--ray"]) == 2
    err = capsys.readouterr().err
    assert "kbuild prewarm --ray" in err and "pip install 'kbuild[ray]'" in err and "Traceback" not in err


def test_engine_ray_in_pyproject_without_a_shared_tier(example_project: Path, capsys) -> None:
    pytest.importorskip("ray")
    cfg = example_project / "pyproject.toml"
    cfg.write_text(cfg.read_text().replace('tune = "auto"', 'tune = "auto"\nprewarm = { engine = "ray" }'))
    assert main(["prewarm", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "remotes" in err and "--remote URL" in err and str(cfg) in err


def test_backend_model_needs_ray(example_project: Path, capsys) -> None:
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--backend", "model"]) == 2
    assert "--ray" in capsys.readouterr().err


def test_model_results_live_under_their_own_key() -> None:
    from kbuild.key import KernelKey

    tuned = KernelKey({"spec": "x", "tuner": {"version": 2, "budget": {"evaluations": 1}}})
    assert model_key(tuned).hex != tuned.hex and model_key(tuned).components["tuner"]["measure"] == "cost-model"
    assert resource_name(90) == "kbuild_sm_90"


def test_no_ship_needs_ray(example_project: Path, capsys) -> None:
    assert main(["prewarm", "--config", str(example_project / "pyproject.toml"), "--no-ship"]) == 2
    assert "--no-ship go with --ray" in capsys.readouterr().err


def test_the_shipped_kbuild_is_laid_out_as_a_wheel(tmp_path: Path) -> None:
    import kbuild.cache
    from kbuild.prewarm.ray_engine import MAPPED_SUBPACKAGES, stage_kbuild

    staged = stage_kbuild(tmp_path)
    assert staged == tmp_path / "kbuild" and (staged / "prewarm" / "ray_engine.py").is_file()
    for name in MAPPED_SUBPACKAGES:  # inside, not beside it, as a checkout keeps them
        assert (staged / name).is_dir() and not (staged / name).is_symlink()
    assert (staged / "cache" / "lease.py").read_bytes() == (Path(kbuild.cache.__file__).parent / "lease.py").read_bytes()
    assert (staged / "hooks" / "pipeline.py").is_file()
    assert not list(staged.rglob("__pycache__")) and not list(staged.rglob("*.pyc"))
