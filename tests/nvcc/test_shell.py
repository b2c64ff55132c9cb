"""What nvcc's shell would do to a plan line (:mod:`kbuild.nvcc.shell`): the lines the launcher may split itself,
and every construct for which ``shlex.split`` and ``sh`` would disagree, refused with its name. Fast, no nvcc; the
real compiles are in test_direct_inputs.py."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from kbuild.nvcc.shell import ShellExpansion, expand

ENV = {"CICC_PATH": "/opt/nvvm/bin", "_SPACE_": " ", "QUOTED": '"-I/x"'}


@pytest.mark.parametrize("line", [
    '"$CICC_PATH/cicc" -arch compute_90 "a b.ii" -o x.ptx',
    'gcc -D "MSG=\\"hi\\"" -D "X=a>b" -c a.cpp',  # quoted operator and escaped quotes: literal
    "gcc '-DX=$HOME' -DY=id'`' -c a.cpp",  # single quotes keep $ and ` literal
    'gcc -D"X=*" ${CICC_PATH}/x -I~/inc a=~/b',  # ~ inside a word is literal
])
def test_lines_split_as_sh_splits_them(line):
    words = shlex.split(expand(line, ENV))
    env_line = "".join(f"{k}={shlex.quote(v)} " for k, v in ENV.items())
    sh = subprocess.run(["sh", "-c", f"{env_line}; printf '%s\\0' {line}"], capture_output=True, check=True,
                        env={"PATH": "/usr/bin:/bin", **ENV}).stdout.decode().split("\0")[:-1]
    assert words == sh


@pytest.mark.parametrize(("line", "named"), [
    ('gcc -D "MSG=\\"`id`\\"" -c a.cpp', "command substitution"),
    ("gcc -DV=$(date) -c a.cpp", "the expansion '$('"),
    ('gcc -D "X=$HOME" -c a.cpp', "$HOME (not assigned by nvcc"),
    ("gcc -DX=$$ -c a.cpp", "the expansion '$$'"),
    ("gcc -DX=${HOME:-x} -c a.cpp", "parameter expansion"),
    ("gcc -DY=a>b -c a.cpp", "the operator '>'"),
    ("gcc -DY=a;b -c a.cpp", "the operator ';'"),
    ("gcc -DZ=* -c a.cpp", "the pattern character '*'"),
    ("gcc -I/inc/[ab] -c a.cpp", "the pattern character '['"),
    ("gcc -DX={a,b} -c a.cpp", "the pattern character '{'"),
    ("gcc ~/inc -c a.cpp", "home directory"),
    ("gcc #-c a.cpp", "comment"),
    ('gcc -D "X=\\$HOME" -c a.cpp', "escaped '$'"),
    ("gcc $QUOTED -c a.cpp", "the value of $QUOTED"),
])
def test_what_the_shell_would_expand_is_refused_with_its_name(line, named):
    with pytest.raises(ShellExpansion) as info:
        expand(line, ENV)
    assert named in str(info.value)
