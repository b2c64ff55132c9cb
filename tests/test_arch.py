"""One table of per-architecture facts (:mod:`kbuild.arch`): no other module tests an SM number, and a new row
reaches the CLI's choices, the cost models, the bench suite and the ISA registry without another edit."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from kbuild import arch
from kbuild.arch import DEFAULT_SM, TABLE, Architecture, architecture, modelled

ROOT = Path(__file__).resolve().parents[1]

#: Where per-architecture facts may be written: the table, and the ISA modules its rows point to (each names its
#: own family).
ALLOWED = ("kbuild/arch.py", "kbuild/sass/isa/")

#: The SM numbers the table knows (75 ... 120): as int literals next to an architecture, they are its facts.
SM_NUMBERS = frozenset(TABLE)

#: A name that holds an architecture: ``arch``, ``self.cc``, ``binary.sm``, ``spec.archs``, ``base_arch``,
#: ``arch_spec(...)``, ``architecture(...)``, ``capability``.
_ARCHISH = re.compile(r"(?:^|_)(?:arch|archs|architecture|cc|sm|sms|capability)(?:$|_)", re.IGNORECASE)
#: A string that is an architecture's name: ``"sm_90"``, ``"sm_90a"``, nvdisasm's ``"SM90a"``.
_ARCH_STRING = re.compile(r"sm_\d+a?|SM\d+a?")


def _source_files() -> Iterator[tuple[str, Path]]:
    """``kbuild/``, ``hooks/`` and ``cache/`` (the folders of pyproject's ``wheel.packages``), as repository paths."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]["packages"]
    folders = sorted({src.split("/")[0] for src in table.values()})
    assert {"kbuild", "hooks", "cache"} <= set(folders), folders
    for folder in ("kbuild", "hooks", "cache"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def _name(node: ast.AST) -> str | None:
    """The identifier a value is read through: ``x``, ``a.b.x``, ``x[...]``, ``f(...)`` all give ``x``/``f``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, (ast.Subscript, ast.Call)):
        return _name(node.value if isinstance(node, ast.Subscript) else node.func)
    return None


def _archish(node: ast.AST) -> bool:
    name = _name(node)
    return name is not None and _ARCHISH.search(name) is not None


def _sm(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value in SM_NUMBERS


def _sm_literals(node: ast.AST) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and bool(node.elts) and all(_sm(e) for e in node.elts)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def sm_number_tests(source: str) -> list[tuple[int, str]]:
    """Every place of ``source`` that decides by an SM number: (line, what).

    * a comparison of an architecture-ish name with an SM number (``arch == 90``, ``self.cc >= 90``);
    * a tuple, list or set of SM numbers (``arch in (80, 90)``, ``archs=(80, 90)``, ``require_gpu((90, 80))``);
    * a dict keyed by SM numbers (``{80: 164 * 1024, 90: 228 * 1024}``);
    * an index by an SM number (``SHARED[90]``);
    * an SM number given to an architecture-ish name (``arch=90``, ``def f(arch: int = 90)``, ``arch_spec(90)``);
    * a string that is an architecture's name (``"sm_90"``), docstrings left out.
    """
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[tuple[int, str]] = []

    def hit(node: ast.AST, what: str) -> None:
        found.append((getattr(node, "lineno", 0), f"{what}: {ast.unparse(node)[:80]}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for a, b in itertools.pairwise(sides):
                if (_sm(b) and _archish(a)) or (_sm(a) and _archish(b)):
                    hit(node, "compares an architecture with an SM number")
        elif _sm_literals(node):
            hit(node, "lists SM numbers")
        elif isinstance(node, ast.Dict) and node.keys and all(_sm(k) for k in node.keys):
            hit(node, "a table keyed by SM numbers")
        elif isinstance(node, ast.Subscript) and _sm(node.slice):
            hit(node, "looks up by an SM number")
        elif isinstance(node, ast.keyword) and node.arg and _ARCHISH.search(node.arg) and _sm(node.value):
            hit(node.value, f"passes an SM number as {node.arg}")
        elif isinstance(node, ast.Call) and node.args and _sm(node.args[0]) and _archish(node.func):
            hit(node, "asks for an architecture by its SM number")
        elif isinstance(node, ast.arguments):
            params = [*node.posonlyargs, *node.args]
            pairs = [*zip(params[len(params) - len(node.defaults):], node.defaults), *zip(node.kwonlyargs,
                                                                                             node.kw_defaults)]
            for param, default in pairs:
                if default is not None and _ARCHISH.search(param.arg) and _sm(default):
                    hit(default, f"defaults {param.arg} to an SM number")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _sm(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_ARCHISH.fullmatch((_name(t) or "").rpartition("_")[2]) for t in targets):  # not ..._MAJOR = 75
                hit(node, "sets an architecture to an SM number")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
              and _ARCH_STRING.fullmatch(node.value)):
            hit(node, "names an architecture")
    return sorted(found)


def test_no_module_outside_the_table_tests_an_sm_number() -> None:
    """:mod:`kbuild.arch`: per-architecture facts live in one table; no other module compares against an SM number.
    Supporting a new architecture is then one row (and one ISA module), not a hunt through the code."""
    seen, bad = 0, []
    for rel, path in _source_files():
        if rel.startswith(ALLOWED):
            continue
        seen += 1
        bad += [f"{rel}:{line}: {what}" for line, what in sm_number_tests(path.read_text())]
    assert seen > 100
    assert not bad, "ask kbuild.arch instead (a fact of the row, or DEFAULT_SM):\n" + "\n".join(bad)


@pytest.mark.parametrize("line", [
    "if target.cc == 90:\n    pass",                                  # kbuild/compile/triton_aot.py
    "if binary.sm != 90:\n    pass",                                  # kbuild/sass/hazards.py
    "x = 'sm_90a' if self.cc >= 90 else 'x'",                          # kbuild/targets.py
    "ok = arch not in (80, 90)",                                      # kbuild/tile/quant.py
    "archs: tuple[int, ...] = (80, 90)",                              # kbuild/bench/spec.py
    "require_gpu((90, 80))",                                          # kbuild/bench/runner.py
    "MODEL_SHARED_PER_SM = {80: 164 * 1024, 90: 228 * 1024}",         # kbuild/tune/level1/measurer.py
    "limit = MODEL_SHARED_PER_SM.get(self.arch, MODEL_SHARED_PER_SM[90])",
    "DEFAULT_LATENCIES = dict(arch_spec(90).latencies)",              # kbuild/tune/measure/model.py
    "def suite_cubins(cache_dir, *, arch: int = 90): pass",           # kbuild/tune/pretrain.py
    "p.add_argument('--target', default='sm_90')",                    # kbuild/commands/tune.py
    "p.add_argument('--arch', type=int, choices=[80, 90])",           # kbuild/commands/tile.py
    "spec = BenchSpec(archs=(90,))",                                  # kbuild/bench/kernels/tma_matmul.py
    "scale = 'a' if kept[0].arch == 90 else 'b'",                     # kbuild/tile/gluon_quant.py
    "fp8 = triton_type == 'x' and self.cc < 89",                      # kbuild/targets.py
    "base_arch = 90",
])
def test_the_check_finds_what_the_code_did(line: str) -> None:
    """Each line was in kbuild before the table (issue 33); the check would have refused it."""
    assert sm_number_tests(line), line


@pytest.mark.parametrize("line", [
    "port = parts.port or (443 if https else 80)",                    # a port, not an architecture
    "text = str(answer)[:80]",                                         # a slice
    "batch, order = order[:100], order[100:]",
    "pct = 100 * rate",
    "ok = len(rows) == 90",
    "help = 'comma-separated targets (e.g. sm_90)'",                  # an example in a sentence
    "attrs = {0x57: 'STACK_CANARY_TRAP_OFFSETS', 0x1C: 'EXIT_INSTR_OFFSETS'}",
    "same = g.cc == cc",
    "name = f'sm_{cc}'",
    "arch = architecture(DEFAULT_SM)",
    "_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75",              # a driver enum (kbuild/device/probe.py)
])
def test_the_check_leaves_other_numbers_alone(line: str) -> None:
    assert sm_number_tests(line) == [], line


def _sm100() -> Architecture:
    """A made-up new architecture: sm_90's facts under another number, on a GPU with more SMs."""
    return dataclasses.replace(architecture(90), sm=100, part=dataclasses.replace(arch.HOPPER, name="B-next",
                                                                                   sms=148))


@pytest.fixture
def new_row(monkeypatch: pytest.MonkeyPatch) -> Architecture:
    from kbuild.sass import isa

    row = _sm100()
    monkeypatch.setattr(arch, "TABLE", {**TABLE, 100: row})
    monkeypatch.setattr(isa, "_REGISTRY", None)  # rebuilt from the patched table; both restored afterwards
    return row


def test_a_new_row_reaches_the_cli_choices_and_the_cost_models(new_row: Architecture) -> None:
    from kbuild.cli import build_parser
    from kbuild.sass.isa import arch_spec, supported_sms
    from kbuild.targets import parse_target
    from kbuild.tile import mma
    from kbuild.tune.level1.measurer import model_shared_per_sm

    assert modelled() == (80, 90, 100)
    args = build_parser().parse_args(["tile", "m:f", "--problem", "256,256,256", "--arch", "100"])
    assert args.arch == 100  # `kbuild tile --arch`'s choices
    assert new_row.part is not None
    assert model_shared_per_sm(100) == new_row.part.shared_per_sm  # the tuner's level-1 cost model
    assert mma.machine(100, "mma").sms == 148 and mma.wgmma_path(100)  # kbuild.tile's cost model
    ranked = {a: mma.plans(a, (8192, 8192, 4096), keep=1)[0] for a in (90, 100)}
    assert ranked[100].arch == 100 and ranked[100].parts["waves"] < ranked[90].parts["waves"]
    assert 100 in supported_sms() and arch_spec(100).latencies == new_row.latencies  # the SASS cost model
    assert parse_target("sm_100a").arch == "sm_100a"


def test_a_new_row_reaches_the_bench_suite(new_row: Architecture) -> None:
    from kbuild.bench.cuda import CudaBenchSpec
    from kbuild.bench.spec import BenchSpec, suite_archs

    assert suite_archs() == (100, 90, 80)
    for spec in (BenchSpec, CudaBenchSpec):
        (factory,) = [f.default_factory for f in dataclasses.fields(spec) if f.name == "archs"]
        assert factory is not dataclasses.MISSING, spec
        assert factory() == (80, 90, 100), spec


def test_every_row_is_consistent() -> None:
    from kbuild.sass.isa import LATENCY_CLASSES, arch_spec

    assert list(TABLE) == sorted(TABLE) and all(sm == row.sm for sm, row in TABLE.items())
    assert DEFAULT_SM in modelled() and set(arch.DEFAULT_TARGETS) <= set(arch.names())
    for row in TABLE.values():
        if row.isa is not None:
            assert arch_spec(row.sm).family == row.family and set(row.latencies or ()) == set(LATENCY_CLASSES)
        if row.wgmma:
            assert row.specific and row.tma, row.name  # wgmma is the arch-specific variant's
        if row.part is not None:
            assert row.part.shared_per_block <= row.part.shared_per_sm, row.name
