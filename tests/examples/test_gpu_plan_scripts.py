"""The GPU plan's scripts are checked here before device time is spent on them (issue 36): every shell script under
``benchmarks/`` parses, and every script and test file the plan's current section (``benchmarks/gpu_session.md``,
"Owed now") names exists, with each option it passes to a Python script or a ``kbuild`` verb known to its parser.

Device time is a few calls a session; a typo found on the GPU machine costs one of them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.script_helpers import BENCHMARKS

ROOT = BENCHMARKS.parent
PLAN = BENCHMARKS / "gpu_session.md"


def _owed_now() -> str:
    """The plan's current section: from the "Owed now" heading to the next heading of its level."""
    text = PLAN.read_text()
    start = text.index("\n## Owed now")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


@pytest.mark.parametrize("script", sorted(p.name for p in BENCHMARKS.glob("*.sh")))
def test_every_gpu_shell_script_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(BENCHMARKS / script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_scripts_the_plan_names_exist_and_take_its_options() -> None:
    section = " ".join(_owed_now().split())  # commands wrap across lines in the Markdown
    named = sorted(set(re.findall(r"benchmarks/([\w.-]+\.(?:sh|py))", section)))
    assert named, "the current section names no script"
    missing = [n for n in named if not (BENCHMARKS / n).is_file()]
    assert not missing, f"gpu_session.md names scripts that do not exist: {missing}"
    for name in (n for n in named if n.endswith(".py")):
        helped = subprocess.run([sys.executable, str(BENCHMARKS / name), "--help"], capture_output=True, text=True,
                                check=False, cwd=ROOT, timeout=120)
        assert helped.returncode == 0, f"{name} --help: {helped.stderr[-2000:]}"
        for command in re.findall(rf"benchmarks/{re.escape(name)}((?: [^`;|&>]+)?)", section):
            for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command):
                assert option in helped.stdout, f"gpu_session.md passes {option} to {name}, which does not take it"


def test_the_tests_and_kbuild_verbs_the_plan_names_exist_and_take_its_options() -> None:
    section = " ".join(_owed_now().split())
    tests = sorted(set(re.findall(r"(tests/[\w/]+\.py)", section)))
    assert not [t for t in tests if not (ROOT / t).is_file()], tests
    verbs = re.findall(r"-m kbuild (\w+)((?: [^`;|&>]+)?)", section)
    for verb, command in verbs:
        helped = subprocess.run([sys.executable, "-m", "kbuild", verb, "--help"], capture_output=True, text=True,
                                check=False, cwd=ROOT, timeout=120)
        assert helped.returncode == 0, f"kbuild {verb} --help: {helped.stderr[-2000:]}"
        for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", command):
            assert option in helped.stdout, f"gpu_session.md passes {option} to kbuild {verb}, which does not take it"
