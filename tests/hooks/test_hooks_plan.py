"""One build entry point: the PEP 517 backend, the setuptools plugin and ``kbuild emit`` all plan the build
with :func:`kbuild.build.plan.plan` and ship the same result; the backend hands its plan to the setuptools
step it runs (no second plan, no module global); the sources of the settings chain as a build sees them
(config settings under the environment, the one bool rule); a write error is a clean error."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hooks_helpers import SETUPTOOLS_EXAMPLE, build_env, copy_project, forget_example_modules
from hostile_helpers import assert_clean_error

from kbuild.build import plan as planning
from kbuild.build.manifest import manifest_bytes
from kbuild.build.pipeline import run_pipeline
from kbuild.errors import ConfigError, UsageError
from kbuild.hooks import backend, setuptools_plugin
from kbuild.settings.variables import Override

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, kbuild_env: Override) -> Iterator[Path]:
    """A copy of the setuptools example as the current directory, its store in KBUILD_STORE, no other KBUILD_*
    (``kbuild_env`` unset every other one)."""
    kbuild_env.set(store=store)
    project = copy_project(SETUPTOOLS_EXAMPLE, tmp_path / "project")
    monkeypatch.chdir(project)
    forget_example_modules()
    yield project
    forget_example_modules()


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[planning.BuildPlan]:
    """Every plan :func:`kbuild.build.plan.plan` returns during the test, in order."""
    made: list[planning.BuildPlan] = []
    real = planning.plan

    def spy(*args: Any, **kwargs: Any) -> planning.BuildPlan:
        result = real(*args, **kwargs)
        made.append(result)
        return result

    monkeypatch.setattr(planning, "plan", spy)
    return made


def test_the_three_build_paths_ship_the_one_plan(project: Path, plans: list[planning.BuildPlan], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]):
    from kbuild.commands import emit

    manifest = backend.plan(None, tmp_path / "backend")
    assert manifest == tmp_path / "backend" / "kbuild.json"
    setuptools_plugin.emit_for_build(out_dir=tmp_path / "setuptools")
    assert emit.main(["--config", "pyproject.toml", "--out-dir", str(tmp_path / "emit")]) == 0
    assert len(plans) == 3, "each path plans once, through planning.plan"
    first = plans[0]
    assert [b.as_json() for b in first.builds] and all(
        [b.as_json() for b in p.builds] == [b.as_json() for b in first.builds] for p in plans)
    shipped = {d: (tmp_path / d / "kbuild.json").read_bytes() for d in ("backend", "setuptools", "emit")}
    assert set(shipped.values()) == {manifest_bytes(first.manifest)}
    for name in ("kbuild_kernels.c", "kbuild_kernels.h"):  # same default prefix and basename everywhere
        assert len({(tmp_path / d / name).read_bytes() for d in shipped}) == 1
    assert capsys.readouterr().err.count("kbuild: add sm_90: untuned: no sm_90 GPU on this machine") == 3


def test_a_replayed_manifest_gives_the_same_sources_without_planning(project: Path, plans: list[planning.BuildPlan],
                                                                      tmp_path: Path):
    manifest = backend.plan(None, tmp_path / "backend")
    assert manifest is not None and len(plans) == 1
    with setuptools_plugin.planned_manifest(manifest):
        handover = setuptools_plugin._PLANNED.get()
        assert handover is not None and handover.package_data is None  # ship = "extension": no package data
        c_file, _, replayed = setuptools_plugin.emit_for_build(out_dir=tmp_path / "replay",
                                                               manifest_path=handover.manifest)
    assert setuptools_plugin._PLANNED.get() is None  # the hand-over ends with the block
    assert len(plans) == 1, "a replay does not plan again"
    assert replayed == json.loads(manifest.read_text())
    assert c_file.read_bytes() == (tmp_path / "backend" / "kbuild_kernels.c").read_bytes()
    assert not hasattr(setuptools_plugin, "PLANNED_MANIFEST")


DRIVER = r"""
import json, sys
from kbuild.build import plan as planning
from kbuild.hooks import backend
count = []
real = planning.plan
def spy(*a, **k):
    count.append(1)
    return real(*a, **k)
planning.plan = spy
name = backend.build_wheel(sys.argv[1], json.loads(sys.argv[2]))
print(json.dumps({"wheel": name, "plans": len(count)}))
"""


def test_the_backend_hands_its_plan_to_setuptools_in_process(project: Path, store: Path, tmp_path: Path):
    """A real setuptools build under the backend: planned once, and the wheel ships the backend's manifest."""
    dist = tmp_path / "dist"
    env = build_env(store)
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(dist), "{}"], cwd=project, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["plans"] == 1
    with zipfile.ZipFile(dist / out["wheel"]) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(".dist-info/kbuild.json")]
        shipped = json.loads(zf.read(member))
    assert [(e["kernel"], e["target"]) for e in shipped["kernels"]] == [("add", "sm_80"), ("add", "sm_90")]


# ---------------------------------------------------------------------------------------------
# The settings chain as a build sees it.

def test_the_environment_beats_config_settings(project: Path, tmp_path: Path, kbuild_env: Override):
    # No kbuild.lock here: a locked build would fail. KBUILD_LOCKED=0 overrides -C kbuild.locked=true.
    kbuild_env.set(locked="0")
    assert backend.plan({"kbuild.locked": "true"}, tmp_path / "a") is not None
    kbuild_env.set(locked=None)
    with pytest.raises(UsageError, match=r"kbuild\.lock"):
        backend.plan({"kbuild.locked": "true"}, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_target_list_in_config_settings_builds_part_of_a_locked_project(project: Path, tmp_path: Path,
                                                                           plans: list[planning.BuildPlan]):
    from kbuild.commands import lock

    assert lock.run(lock_args()) == 0
    manifest = backend.plan({"kbuild.targets": "sm_90", "kbuild.locked": "true"}, tmp_path / "out")
    assert manifest is not None
    assert [e["target"] for e in json.loads(manifest.read_text())["kernels"]] == ["sm_90"]
    assert plans[-1].locked and [b.status for b in plans[-1].builds] == ["locked: baseline"]


def lock_args() -> Any:
    import argparse

    return argparse.Namespace(config="pyproject.toml", targets=None, json=False, lock_file=None, strict=False)


@pytest.mark.hostile(fault="bad boolean", outcome="clean error")
@pytest.mark.parametrize(("config", "env", "names"), [
    pytest.param({"kbuild.locked": "maybe"}, {}, ["config-settings", "kbuild.locked"], id="config-setting"),
    pytest.param({}, {"strict": "y"}, ["environment variable KBUILD_STRICT"], id="environment"),
    pytest.param({}, {"debug": "verbose"}, ["environment variable KBUILD_DEBUG"], id="debug"),
])
def test_a_bad_boolean_stops_the_build_naming_it(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 kbuild_env: Override, config: dict[str, str],
                                                 env: dict[str, str], names: list[str]):
    kbuild_env.set(env)
    with pytest.raises(SystemExit) as exit_:
        backend.build_wheel(str(tmp_path / "dist"), config)
    assert_clean_error(int(exit_.value.code or 0), capsys.readouterr().err, names=names)
    assert not (tmp_path / "dist").exists()


@pytest.mark.hostile(fault="unknown setting", outcome="clean error")
def test_an_unknown_config_setting_is_named_with_a_suggestion(project: Path, tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        backend.plan({"kbuild.lockd": "1"}, tmp_path / "out")
    assert (err.value.where, err.value.key) == ("config-settings", "kbuild.lockd")
    assert "did you mean 'kbuild.locked'?" in str(err.value)


# ---------------------------------------------------------------------------------------------
# Writing the plan's files.

@pytest.mark.hostile(fault="bad output path", outcome="clean error")
@pytest.mark.parametrize("path", ["backend", "setuptools"])
def test_an_unwritable_build_directory_is_a_clean_error(project: Path, tmp_path: Path, path: str):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    out = blocker / "kbuild"
    with pytest.raises(UsageError) as err:
        if path == "backend":
            backend.plan(None, out)
        else:
            setuptools_plugin.emit_for_build(out_dir=out)
    assert str(out) in str(err.value) and "cannot write" in str(err.value)
    assert blocker.read_text() == "not a directory\n"


def test_the_setuptools_command_reports_a_write_error_as_one_line(project: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]):
    from setuptools import Distribution, Extension

    blocker = tmp_path / "build-temp"
    blocker.write_text("")
    dist = Distribution({"name": "kbx-setup", "ext_modules": [Extension("kbx_setup._kbx", ["src/_kbx.c"])]})
    cmd = setuptools_plugin.kbuild_build_ext()(dist)
    cmd.initialize_options()
    cmd.build_temp = str(blocker)
    cmd.finalize_options()
    with pytest.raises(SystemExit) as exit_:
        cmd._kbuild_add_kernels()
    assert_clean_error(int(exit_.value.code or 0), capsys.readouterr().err, names=[str(blocker / "kbuild")])


# ---------------------------------------------------------------------------------------------
# The phases.

class VanishingStore:
    """A store whose first ``get`` of one key misses although ``contains`` said yes (an entry evicted between the
    two, by another build sharing the store)."""

    def __init__(self, store: Any, key: str) -> None:
        self.store, self.key, self.gets = store, key, 0
        self.puts: list[str] = []

    def contains(self, key: str) -> bool:
        return key == self.key or self.store.contains(key)

    def get(self, key: str) -> Any:
        if key == self.key:
            self.gets += 1
            if self.gets == 1:
                return None
        return self.store.get(key)

    def put(self, art: Any) -> None:
        self.puts.append(art.key)
        self.store.put(art)


def test_a_memo_build_whose_entry_vanishes_is_imported_on_its_own(project: Path):
    from kbuild.cache import open_store
    from kbuild.settings.sources import load_settings

    settings = load_settings("pyproject.toml")
    with open_store(settings) as real:
        first = run_pipeline(settings, real, memo=True)  # a full resolve that writes the memo
        forget_example_modules()
        store = VanishingStore(real, first[0].baseline_key.hex)
        again = run_pipeline(settings, store, memo=True)
    assert store.gets == 2 and store.puts == []  # looked up again after the import; nothing compiled
    assert [b.as_json() for b in again] == [b.as_json() for b in first]
    assert again[0].fn is not None and again[1].fn is None  # only the vanished one was imported
