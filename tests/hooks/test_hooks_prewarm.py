"""`kbuild prewarm`: tunes what the store lacks, stores each result at once (resumable), and a re-run
does nothing. The GPU and the tuner are faked at the edge; the real ones run on the H200."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import CMAKE_EXAMPLE, copy_project, forget_example_modules

from kbuild.build import tunable
from kbuild.build.prewarm import action, prewarm, with_remote
from kbuild.build.tuning import tuned_artefact
from kbuild.cli import main
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override


@pytest.fixture
def project(tmp_path: Path, store: Path, kbuild_env: Override) -> Iterator[Path]:
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    kbuild_env.set(store=store)
    forget_example_modules()
    yield project
    forget_example_modules()


class Tuner:
    def __init__(self, interrupt_after: int | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.interrupt_after = interrupt_after

    def __call__(self, settings: Any, b: Any) -> Any:
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt
        self.calls.append((b.spec.name, b.target.name))
        return tuned_artefact(b, b.artefact.cubin + b"\0tuned", accepted=True, speedup=1.1, reason="accepted: fake")


def test_prewarm_tunes_what_is_missing_then_does_nothing(project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: cc == 90)
    settings = load_settings(project / "pyproject.toml")
    tuner = Tuner()
    builds = prewarm(settings, tuner=tuner)
    assert sorted(tuner.calls) == [(k, "sm_90") for k in ("layernorm", "matmul_leaky_relu", "softmax")]
    acts = {(b.spec.name, b.target.name): action(b) for b in builds}
    assert all(acts[(k, "sm_90")] == "tuned" for k in ("layernorm", "matmul_leaky_relu", "softmax"))
    assert all(acts[(k, "sm_80")] == "baseline found" for k in ("layernorm", "matmul_leaky_relu", "softmax"))
    forget_example_modules()
    again = Tuner()
    rebuilt = prewarm(load_settings(project / "pyproject.toml"), tuner=again)
    assert again.calls == []
    assert {action(b) for b in rebuilt if b.target.name == "sm_90"} == {"found"}


def test_an_interrupted_prewarm_resumes_where_it_stopped(project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: cc == 90)
    settings = load_settings(project / "pyproject.toml")
    first = Tuner(interrupt_after=1)
    with pytest.raises(KeyboardInterrupt):
        prewarm(settings, tuner=first)
    assert len(first.calls) == 1
    forget_example_modules()
    second = Tuner()
    prewarm(load_settings(project / "pyproject.toml"), tuner=second)
    assert len(second.calls) == 2 and first.calls[0] not in second.calls


def test_with_remote_adds_a_writable_tier(project: Path):
    s = with_remote(load_settings(project / "pyproject.toml"), "http://127.0.0.1:9/cache")
    assert s.remotes[-1].url == "http://127.0.0.1:9/cache" and s.remotes[-1].writable


def test_cli_on_a_machine_without_gpu(project: Path, capsys: pytest.CaptureFixture[str], kbuild_env: Override):
    cfg = str(project / "pyproject.toml")
    assert main(["prewarm", "--config", cfg, "--targets", "sm_90", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["action"] for r in rows} == {"baseline found"}
    assert {r["status"] for r in rows} == {"untuned: no sm_90 GPU on this machine"}
    # A remote that is down: a warning and the local tier still serves; --strict fails with exit 4.
    forget_example_modules()
    assert main(["prewarm", "--config", cfg, "--targets", "sm_90", "--remote", "http://127.0.0.1:9", "--json"]) == 0
    capsys.readouterr()
    forget_example_modules()
    assert main(["prewarm", "--config", cfg, "--targets", "sm_90", "--remote", "http://127.0.0.1:9", "--strict"]) == 4
    assert "127.0.0.1:9" in capsys.readouterr().err
    kbuild_env.set(tune="off")
    assert main(["prewarm", "--config", cfg]) == 2
    assert "nothing to prewarm" in capsys.readouterr().err
