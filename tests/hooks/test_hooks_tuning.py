"""Tune on a miss, with the GPU and the tuner faked at the edge (the real ones run on the H200):
which kernel × target gets tuned, that each result is stored under the tuned key at once and
found by the next build without tuning again, what the manifest says, and tune = "require"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import CMAKE_EXAMPLE, copy_project, forget_example_modules

from kbuild.build import tunable
from kbuild.build.manifest import build_manifest
from kbuild.build.pipeline import run_pipeline
from kbuild.build.plan import kernels_from_builds
from kbuild.build.tuning import tuned_artefact
from kbuild.emit import render_sources
from kbuild.errors import UntunedError
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override


@pytest.fixture
def project(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, kbuild_env: Override) -> Iterator[Path]:
    project = copy_project(CMAKE_EXAMPLE, tmp_path / "p")
    kbuild_env.set(store=store)
    p = project / "pyproject.toml"
    text = p.read_text()
    bench = 'bench = "kbx_demo.bench:matmul_leaky_relu"'
    assert bench in text
    p.write_text(text.replace(bench, "", 1))  # two kernels keep their bench spec, the matmul has none
    monkeypatch.setattr(tunable, "has_gpu", lambda cc: cc == 90)  # "an sm_90 GPU is here"
    forget_example_modules()
    yield project
    forget_example_modules()


class FakeTuner:
    def __init__(self, accept: dict[str, float]) -> None:
        self.accept = accept
        self.calls: list[tuple[str, str]] = []

    def __call__(self, settings: Any, b: Any) -> Any:
        self.calls.append((b.spec.name, b.target.name))
        if b.spec.name in self.accept:
            return tuned_artefact(b, b.artefact.cubin + b"\0tuned", accepted=True, speedup=self.accept[b.spec.name],
                                  reason="accepted: fake")
        return tuned_artefact(b, b"ignored", accepted=False, speedup=0.99,
                              reason="baseline kept: nothing beat the A/A spread")


def test_tunes_on_a_miss_stores_at_once_and_reuses(project: Path):
    settings = load_settings(project / "pyproject.toml")
    tuner = FakeTuner({"softmax": 1.25})
    builds = {(b.spec.name, b.target.name): b for b in run_pipeline(settings, tune_on_miss=True, tuner=tuner)}
    assert sorted(tuner.calls) == [("layernorm", "sm_90"), ("softmax", "sm_90")]
    assert builds[("softmax", "sm_90")].status == "tuned ×1.250"
    assert builds[("softmax", "sm_90")].shipped.cubin.endswith(b"\0tuned")
    assert builds[("layernorm", "sm_90")].status == "tuned: baseline kept: nothing beat the A/A spread"
    assert builds[("matmul_leaky_relu", "sm_90")].status.startswith("untuned: the kernel has no bench spec")
    assert builds[("softmax", "sm_80")].status == "untuned: no sm_80 GPU on this machine"

    states = {(e["kernel"], e["target"]): (e["state"], e["speedup"])
              for e in build_manifest(builds.values(), tune="auto")["kernels"]}
    assert states[("softmax", "sm_90")] == ("tuned", 1.25)
    assert states[("layernorm", "sm_90")] == ("baseline-kept", None)
    assert states[("softmax", "sm_80")] == ("baseline", None)
    kept = builds[("layernorm", "sm_90")]
    assert kept.shipped.cubin_sha256 == kept.shipped.meta["baseline_cubin_sha256"]  # the baseline ships

    source = render_sources(kernels_from_builds(builds.values()))["kbuild_kernels.c"].decode()
    assert f"key {builds[('softmax', 'sm_90')].shipped.key}, cubin sha256 " in source
    assert ", tuned */" in source

    # The next build finds the results: no tuning again.
    forget_example_modules()
    again = FakeTuner({})
    rebuilt = {(b.spec.name, b.target.name): b for b in run_pipeline(settings, tune_on_miss=True, tuner=again)}
    assert again.calls == []
    assert rebuilt[("softmax", "sm_90")].hit and rebuilt[("softmax", "sm_90")].status == "tuned ×1.250"


def test_require_fails_for_what_cannot_be_tuned_here_before_any_tuning(project: Path, kbuild_env: Override):
    kbuild_env.set(tune="require")
    settings = load_settings(project / "pyproject.toml")
    tuner = FakeTuner({})
    with pytest.raises(UntunedError) as err:
        run_pipeline(settings, tune_on_miss=True, tuner=tuner)
    text = str(err.value)
    assert "4 kernel × target would ship untuned" in text
    assert "matmul_leaky_relu / sm_90: untuned: the kernel has no bench spec" in text
    assert "softmax / sm_80: untuned: no sm_80 GPU on this machine" in text
    assert tuner.calls == []


@pytest.mark.slow
def test_the_example_bench_specs_compile_to_the_shipped_cubins(session_store: Path, monkeypatch: pytest.MonkeyPatch, kbuild_env: Override):
    """The tuner measures what the spec launches: it must be the very kernel the wheel ships."""
    import tempfile

    from triton import knobs

    from kbuild.bench.spec import compile_spec, load_spec, validate_inputs, validate_spec

    kbuild_env.set(store=session_store)
    monkeypatch.syspath_prepend(str(CMAKE_EXAMPLE))
    forget_example_modules()
    settings = load_settings(CMAKE_EXAMPLE / "pyproject.toml")
    shipped = {(b.spec.name, b.target.cc): b.shipped.cubin for b in run_pipeline(settings)}
    for spec_decl in settings.kernels:
        assert spec_decl.bench == f"kbx_demo.bench:{spec_decl.name}"
        spec = load_spec(spec_decl.bench, small=True)
        validate_spec(spec)
        validate_inputs(spec, spec.make_inputs(0, "cpu"))
        for cc in (80, 90):
            with tempfile.TemporaryDirectory() as tmp, knobs.compilation.scope(), knobs.cache.scope():
                knobs.compilation.disable_line_info = True
                knobs.cache.dir = tmp
                compiled = compile_spec(spec, spec.configs[0], cc)
            assert compiled.asm["cubin"] == shipped[(spec_decl.name, cc)], (spec_decl.name, cc)
    forget_example_modules()


def test_a_failing_tuner_ships_the_baseline_under_auto_and_fails_under_require(project: Path,
                                                                                kbuild_env: Override):
    from kbuild.errors import UsageError

    def broken(settings: Any, b: Any) -> Any:
        raise UsageError(f"bench spec {b.spec.bench}: the baseline leaves output 'out_ptr' partly unwritten")

    settings = load_settings(project / "pyproject.toml")
    builds = {(b.spec.name, b.target.name): b for b in run_pipeline(settings, tune_on_miss=True, tuner=broken)}
    b = builds[("softmax", "sm_90")]
    assert not b.tuned and b.status.startswith("untuned: tuning failed: bench spec kbx_demo.bench:softmax")
    assert b.shipped.key == b.baseline_key.hex  # the baseline ships; nothing stored under the tuned key
    forget_example_modules()
    kbuild_env.set(tune="require")
    p = project / "pyproject.toml"
    p.write_text(p.read_text().replace('targets = ["sm_80", "sm_90"]', 'targets = ["sm_90"]'))
    p.write_text(p.read_text().replace('name = "matmul_leaky_relu"', 'name = "matmul_leaky_relu"\nbench = "x.y:z"', 1))
    with pytest.raises(UsageError, match="partly unwritten"):
        run_pipeline(load_settings(p), tune_on_miss=True, tuner=broken)
