"""GPU target strings: what parses, to which exact architecture, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbuild.cli import main
from kbuild.errors import ConfigError
from kbuild.settings.sources import load_settings
from kbuild.settings.variables import Override
from kbuild.targets import Target, parse_target

#: Strings that Python's int() (and a Unicode-aware ``\d``) read as a supported compute capability.
NON_ASCII_TARGETS = [
    pytest.param("sm_９０", id="fullwidth"),
    pytest.param("sm_٩٠", id="arabic-indic"),
    pytest.param("sm_۹۰", id="extended-arabic-indic"),
    pytest.param("sm_९०", id="devanagari"),
    pytest.param("sm_𝟗𝟎", id="mathematical-bold"),
    pytest.param("ｓｍ_90", id="fullwidth-letters"),
    pytest.param("sm_90\u200b", id="zero-width-space"),
    pytest.param("sm_\u0669\u0660a", id="arabic-indic-a"),
]


@pytest.mark.parametrize(("text", "cc", "arch"), [("sm_90", 90, "sm_90a"), ("sm_90a", 90, "sm_90a"), ("sm_80", 80, "sm_80"),
                                                  ("sm_86", 86, "sm_86"), ("sm_120", 120, "sm_120a")])
def test_valid_targets(text: str, cc: int, arch: str):
    t = parse_target(text)
    assert t == Target(cc) and t.arch == arch


#: Spellings that once passed for a target (issue 32: "sm90" was read as sm_90 silently), and the one suggested.
LOOK_ALIKES = [("sm90", "sm_90"), ("90", "sm_90"), ("SM_80", "sm_80"), (" sm_90 ", "sm_90"), ("sm86", "sm_86"),
               ("sm_090", "sm_90"), ("90a", "sm_90a"), ("SM_90A", "sm_90a"), ("sm_90 ", "sm_90")]


@pytest.mark.hostile(fault="look-alike target", outcome="clean error")
@pytest.mark.parametrize(("text", "suggestion"), LOOK_ALIKES)
def test_look_alike_targets_are_refused_with_the_spelling_they_mean(text: str, suggestion: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    with pytest.raises(ValueError, match=f"did you mean '{suggestion}'"):
        parse_target(text)
    path = tmp_path / "pyproject.toml"  # the same rule wherever a target is read
    path.write_text(f'[tool.kbuild]\ntargets = ["{text}"]\n')
    with pytest.raises(ConfigError, match=f"targets\\[0\\]: .*did you mean '{suggestion}'"):
        load_settings(path, environ={})
    path.write_text("[tool.kbuild]\n")
    if text == text.strip():  # a variable's list is split at commas and stripped, as --targets' is
        with pytest.raises(ConfigError, match=f"^environment variable KBUILD_TARGETS\\[0\\]: .*did you mean "
                                              f"'{suggestion}'"):
            load_settings(path, environ={"KBUILD_TARGETS": text})
    for argv in (["explain", "k", "--config", str(path), "--target", text], ["cache", "ls", "--target", text]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("error: ") == 1 and f"did you mean '{suggestion}'" in err, err


@pytest.mark.parametrize("text", ["sm_99", "sm_80a", "sm_", "", "sm_0090", "compute_90", 90, None, ["sm_90"]])
def test_invalid_targets(text):
    with pytest.raises(ValueError):
        parse_target(text)


@pytest.mark.hostile(fault="non-ASCII target", outcome="clean error")
@pytest.mark.parametrize("text", NON_ASCII_TARGETS)
def test_non_ascii_digits_are_not_a_target(text: str):
    with pytest.raises(ValueError, match="non-ASCII character") as err:
        parse_target(text)
    assert "\n" not in str(err.value)


@pytest.mark.hostile(fault="non-ASCII target", outcome="clean error")
@pytest.mark.parametrize("text", NON_ASCII_TARGETS)
def test_non_ascii_target_in_pyproject_and_environment(tmp_path: Path, text: str):
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[tool.kbuild]\ntargets = ["sm_80", "{text}"]\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ={})
    assert (err.value.where, err.value.key) == (str(path), "targets[1]")
    assert "non-ASCII" in str(err.value) and err.value.exit_code == 2
    path.write_text("[tool.kbuild]\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ={"KBUILD_TARGETS": f"sm_80,{text}"})
    assert err.value.key == "KBUILD_TARGETS[1]" and "non-ASCII" in str(err.value)


@pytest.mark.hostile(fault="non-ASCII target", outcome="clean error")
def test_non_ascii_target_on_the_command_line(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override):
    store = tmp_path / "store"
    kbuild_env.set(store=store)
    code = main(["compile", "--config", str(example_project / "pyproject.toml"), "--targets", "sm_９０", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert "--targets" in err and "non-ASCII" in err and "Traceback" not in err
    assert not store.exists()
