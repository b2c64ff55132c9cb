"""Malformed ``kbuild.tile`` programs through ``kbuild tile``: one clean error naming the program, never a traceback
(issue 32, item 7). The catalogue (``benchmarks/tile_fuzz.py``: Python's ``if``/``range``/``math.exp``/``**``/``@``
on a tile, ``load(x, other="zero")``, ``10**400``, ``.to(None)``, ``Scalar("int77")``, ``os.getcwd`` as the
kernel, kernels that raise, exit or recurse, names that collide with the emitted kernel's), then programs that
hypothesis writes from the language's operations with wrong operands mixed in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from script_helpers import load_benchmark

fuzz = load_benchmark("tile_fuzz")


@pytest.fixture(scope="module")
def module_dir() -> Iterator[Path]:
    with fuzz._module_dir() as d:
        yield d


@pytest.mark.hostile(fault="malformed tile program", outcome="clean error")
def test_every_malformed_program_is_one_clean_error_and_every_edge_builds(module_dir: Path) -> None:
    """The whole catalogue in one test (161 programs, about 3 s): each fault one clean error naming the program,
    each well-formed edge case built. Before issue 32: 65 tracebacks, 17 accepted, 5 unclean."""
    wrong = []
    for name, source, fn, extra in fuzz.programs():
        r = fuzz.run_program(source, fn, extra, module_dir)
        if r["outcome"] != "clean":
            wrong.append((name, r))
    for name, source, fn in fuzz.EDGES:
        r = fuzz.run_program(fuzz.HEADER + source, fn, fuzz._args(source), module_dir)
        if r["outcome"] != "accepted":
            wrong.append((name, r))
    assert not wrong, "\n".join(f"{name}: {r}" for name, r in wrong)


@pytest.mark.hostile(fault="tile block too large", outcome="clean error")
def test_block_of_2_to_the_40_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from kbuild.cli import main

    for block in (["--block", f"N={2**40}"], ["--block", "N=64", "--block", f"M={2**40}"], ["--block", "N=２"]):
        assert main(["tile", "kbuild.tile.kernels:softmax_tile", *block, "--warps", "4"]) == 2
        err = capsys.readouterr().err
        assert err.count("error: ") == 1 and "Traceback" not in err, err
    assert main(["tile", "kbuild.tile.kernels:softmax_tile", "--block", f"N={2**40}", "--warps", "4"]) == 2
    assert "1,048,576" in capsys.readouterr().err


# --- programs hypothesis writes --------------------------------------------------------------------------------

TENSORS = ["x", "w", "y"]
CONSTANTS = st.one_of(
    st.integers(-(10**6), 10**6).map(repr),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: f"float({str(f)!r})"),
    st.sampled_from(["None", "True", "[1]", "1j", "10**400", "-10**400", "'zero'", "s", "extent('N')", "(s > 0)"]),
)
DTYPES = st.sampled_from(['"fp16"', '"bf16"', '"fp32"', '"int77"', "None", "32", '"fp8"', '"i32"'])
AXES = st.sampled_from(["0", "1", "2", "-1", "None", "'1'", "1.0", "True"])
TENSOR_REFS = st.sampled_from([*TENSORS, "s", "'x'", "None", "v0"])


@st.composite
def statement(draw: st.DrawFn, i: int) -> str:
    v = f"v{draw(st.integers(0, i))}"  # v{i} itself is not defined yet: a NameError now and then
    vc = draw(st.one_of(st.just(v), CONSTANTS))
    t = draw(TENSOR_REFS)
    template = draw(st.sampled_from([
        "load({t})", "load({t}, other={c})", "load({t}).to({d})", "exp({v})", "sqrt({v})", "rsqrt({v})",
        "maximum({v}, {vc})", "rearrange({v})", "{v} + {vc}", "{v} - {vc}", "{v} * {vc}", "{v} / {vc}", "{vc} * {v}",
        "-{v}", "{v}.to({d})", "{v}.sum(axis={a})", "{v}.max(axis={a})", "{v}.min(axis={a})", "{v}[:, None]",
        "{v}[None, :]", "{v}[{a}]", "extent({d})", "zeros('MN', {d})", "shared({t})", "{v} ** {c}", "{v} @ {v}",
        "{v} > {vc}", "float({v})", "range({v})", "{v} if {v} else {vc}", "len({v})", "abs({v})",
    ]))
    expr = template.format(t=t, c=draw(CONSTANTS), d=draw(DTYPES), v=v, vc=vc, a=draw(AXES))
    return f"v{i} = {expr}"


@st.composite
def program(draw: st.DrawFn) -> str:
    params = ['x: Tensor("fp16", "MN")', 'w: Tensor("fp16", "N")', 'y: Tensor("fp16", "MN")', 's: Scalar("fp32")']
    if draw(st.integers(0, 9)) == 0:  # now and then a bad annotation: the import fails, naming the module
        i = draw(st.integers(0, 3))
        params[i] = params[i].split(":")[0] + ": " + draw(st.sampled_from(
            ['Tensor("int4", "MN")', 'Tensor("fp8", "MN")', 'Tensor("fp16", "XY")', 'Scalar("int77")', "Scalar(None)",
             "int", '"undefined_name"', 'Tensor("fp16", "MK")']))
    n = draw(st.integers(1, 6))
    body = ["v0 = load(x)"] + [draw(statement(i)) for i in range(1, n)]
    stores = draw(st.lists(st.tuples(TENSOR_REFS, st.integers(0, n - 1)), min_size=0, max_size=2))
    body += [f"store({t}, v{j})" for t, j in stores]
    if draw(st.booleans()):
        body.append(f"store(y, v{n - 1})")
    if draw(st.booleans()):
        body += ["acc = zeros('MN')", "for k in loop('K'):", "    mma(shared(x), shared(w), acc)", "store(y, acc)"]
    lines = "\n".join(f"    {line}" for line in body)
    return f"{fuzz.HEADER}\ndef kern({', '.join(params)}):\n{lines}\n"


@pytest.mark.hostile(fault="malformed tile program", outcome="clean error")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(source=program())
def test_any_generated_program_builds_or_is_one_clean_error(source: str, module_dir: Path) -> None:
    r = fuzz.run_program(source, "kern", fuzz._args(source), module_dir)
    assert r["outcome"] in ("clean", "accepted"), (r, source)


@pytest.mark.hostile(fault="malformed tile program", outcome="clean error")
def test_zeros_without_an_mma_is_one_clean_error(module_dir: Path) -> None:
    """Found by the property above in CI (2026-12-06): ``zeros`` in a program with no ``mma`` reached the row-wise
    emitter, which has no statement for it, and raised AssertionError."""
    source = (f"{fuzz.HEADER}\ndef kern(x: Tensor(\"fp16\", \"MN\"), y: Tensor(\"fp16\", \"MN\")):\n"
              "    v0 = load(x)\n    v1 = zeros('MN', \"fp16\")\n    store(y, v1)\n")
    r = fuzz.run_program(source, "kern", fuzz._args(source), module_dir)
    assert r["outcome"] == "clean" and "zeros(...) belongs to a K-loop" in r["error"], r
