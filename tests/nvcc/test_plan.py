"""nvcc's dryrun plan, dependency files and the ``kbuild nvcc`` verb: the parsing rules on their own (fast), then
the plan of the real nvcc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbuild.nvcc import schedule
from kbuild.nvcc.deps import format_nvcc_deps, parse_make_deps, union
from kbuild.nvcc.plan import (
    DEPS_STEP,
    Unsupported,
    conflicting_flag,
    dependency_target,
    dryrun,
    is_preprocess,
    parse_plan,
    split_threads,
)
from kbuild.nvcc.steps import NotCacheable, cicc_step, cudafe_step, ptxas_step

KEEP = Path("/tmp/keep")


def test_assignments_are_expanded_in_the_commands():
    plan = parse_plan('#$ _SPACE_= \n#$ CICC_PATH=/opt/nvvm/bin\n#$ "$CICC_PATH/cicc" -arch compute_90 "a b.ii" -o x.ptx\n',
                      keep_dir=KEEP)
    assert plan.env == {"_SPACE_": " ", "CICC_PATH": "/opt/nvvm/bin"}
    (cmd,) = plan.commands
    assert cmd.argv == ("/opt/nvvm/bin/cicc", "-arch", "compute_90", "a b.ii", "-o", "x.ptx") and cmd.tool == "cicc"


@pytest.mark.parametrize(("text", "reason"), [
    ("#$ cicc a.ii -o a.ptx > log\n", "the operator '>'"),
    ("#$ $NOPE/cicc a.ii\n", "$NOPE (not assigned by nvcc"),
    ("#$ cicc a.ii\nnvcc warning: something\n", "line 2 of nvcc's plan is not a step"),
    ("#$ gcc -E a.cu -o a.ii\n#$ gcc -c a.ii -o a.o\n", "compiles no device code"),
    ('#$ cicc "unterminated\n', "cannot be split"),
])
def test_what_the_plan_parser_cannot_read_is_unsupported_with_the_reason(text, reason):
    with pytest.raises(Unsupported) as info:
        parse_plan(text, keep_dir=KEEP)
    assert reason in str(info.value)


def test_the_dependency_pseudo_step_is_kept_with_its_file():
    plan = parse_plan('#$ cicc a.ii -o a.ptx\n#$ -- Filter Dependencies -- > "out dir/x.d"\n', keep_dir=KEEP)
    assert plan.commands[1].argv == (DEPS_STEP, "out dir/x.d")


def test_flags_the_launcher_cannot_honour():
    flag = conflicting_flag(["-c", "a.cu", "--keep-dir", "d"])
    assert flag is not None and flag.startswith("--keep-dir")
    assert conflicting_flag(["-t4"]) is None and conflicting_flag(["--threads=2"]) is None  # run by the launcher
    assert conflicting_flag(["-c", "a.cu", "-o", "a.o", "-O3"]) is None


@pytest.mark.parametrize(("args", "threads", "rest"), [
    (["-c", "a.cu", "--threads", "4"], 4, ["-c", "a.cu"]),
    (["--threads=3", "-c"], 3, ["-c"]),
    (["-t", "2", "-c"], 2, ["-c"]),
    (["-t5"], 5, []),
    (["-t=6", "-time", "t.csv"], 6, ["-time", "t.csv"]),
    (["-c"], 1, ["-c"]),
    (["--threads", "x"], 1, ["--threads", "x"]),  # not a number: left for nvcc to reject
])
def test_split_threads(args, threads, rest):
    assert split_threads(args) == (threads, rest)
    assert split_threads(["--threads", "0"])[0] >= 1  # nvcc's 0: one per CPU


def test_dependency_target():
    assert dependency_target(["-MD", "-MT", "t.o", "-o", "x.o"]) == "t.o"
    assert dependency_target(["-MD", "-o", "build/x.o"]) == "build/x.o"
    with pytest.raises(Unsupported, match="-MMD"):
        dependency_target(["-MMD", "-MT", "t.o"])
    with pytest.raises(Unsupported, match="without -MT or -o"):
        dependency_target(["-MD", "a.cu"])


def test_make_dependencies_round_trip_with_spaces_and_dollars():
    files = ["src/a.cu", "/inc/with space.h", "/inc/$weird.h", "/inc/b.h"]
    text = format_nvcc_deps("obj dir/a.o", files)
    assert text.startswith("obj\\ dir/a.o : src/a.cu \\\n    /inc/with\\ space.h \\\n")
    assert parse_make_deps(text) == files
    assert parse_make_deps("a.o: a.cu \\\n /usr/x.h /usr/y.h\n") == ["a.cu", "/usr/x.h", "/usr/y.h"]
    assert union([["a", "b"], ["b", "c", "a"]]) == ["a", "b", "c"]


def test_the_real_plan_has_one_cicc_and_ptxas_per_architecture(nvcc, cu, tmp_path):
    plan = dryrun(nvcc, ["-c", "k.cu", "-o", "k.o", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                         "arch=compute_90,code=sm_90"], tmp_path, cwd=cu, env={"PATH": "/usr/bin:/bin"})
    tools = plan.tools()
    assert tools.count("cicc") == 2 and tools.count("ptxas") == 2 and tools.count("cudafe++") == 1
    assert tools.count("fatbinary") == 1
    assert all(Path(c.argv[0]).is_absolute() or "/" not in c.argv[0] for c in plan.commands)


def test_kbuild_nvcc_where(nvcc):
    out = subprocess.run([sys.executable, "-m", "kbuild", "nvcc", "--where", "--json"], capture_output=True,
                         text=True, check=True).stdout
    doc = json.loads(out)
    assert doc["nvcc"] == nvcc and Path(doc["toolkit"], "bin", "ptxas").is_file()


@pytest.mark.parametrize("make", [cicc_step, ptxas_step, cudafe_step])
def test_a_cached_step_with_a_response_file_is_not_cached(make, tmp_path):
    """Its key would hold the name ``@f.rsp``, not what the file says: the step runs uncached instead."""
    argv = ("/opt/bin/tool", "@f.rsp", "a.ii", "-o", "a.ptx")
    with pytest.raises(NotCacheable, match=r"response file @f\.rsp"):
        make(argv, cwd=tmp_path, tmp=str(tmp_path), identity={})


def test_the_schedule_of_a_real_plan_keeps_each_architecture_in_order_and_the_rest_apart(nvcc, cu, tmp_path):
    """What ``--threads`` may overlap (:mod:`kbuild.nvcc.schedule`): each architecture's preprocessing, cicc and
    ptxas in order, after cudafe++ (the module id file); no architecture waits for another; fatbinary and the
    host compile wait for everything before them."""
    keep = tmp_path / "keep"
    keep.mkdir()
    plan = dryrun(nvcc, ["-c", "k.cu", "-o", "k.o", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                         "arch=compute_90,code=sm_90"], keep, cwd=cu, env={"PATH": "/usr/bin:/bin"})
    argvs = [c.argv for c in plan.commands]
    overlaps = [c.tool in ("cicc", "ptxas", "cudafe++") or is_preprocess(c.argv) for c in plan.commands]
    deps = schedule.dependencies(argvs, overlaps, keep, cu)
    tools = plan.tools()
    at = {t: [i for i, x in enumerate(tools) if x == t] for t in set(tools)}
    (cudafe,) = at["cudafe++"]
    c80, c90 = at["cicc"]
    p80, p90 = at["ptxas"]
    assert cudafe in deps[c80] and cudafe in deps[c90] and c80 not in deps[c90]
    assert deps[p80] == {c80} and deps[p90] == {c90}
    (fatbin,) = at["fatbinary"]
    assert deps[fatbin] == set(range(fatbin)) and deps[-1] == set(range(len(argvs) - 1))


def test_the_scheduler_runs_at_most_n_and_stops_after_a_failure():
    import threading
    import time

    lock = threading.Lock()
    now = most = 0
    ran: list[int] = []

    def job(i: int) -> int:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
            ran.append(i)
        time.sleep(0.05)
        with lock:
            now -= 1
        return 3 if i == 2 else 0

    deps = [set(), set(), set(), set(), {0, 1, 2, 3}, set()]
    assert schedule.run(deps, job, 2) == 3
    assert most == 2 and 4 not in ran  # the barrier after the failure never started
