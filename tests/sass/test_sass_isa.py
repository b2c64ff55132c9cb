"""The ISA tables are the only place that knows opcodes (issue 14): the dependency model, the cost model
and the tuner's features read every opcode fact from :mod:`kbuild.sass.isa`."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest
from sass_synth import P, build

from kbuild.sass.isa import (
    FEATURE_CLASSES,
    LATENCY_CLASSES,
    OpInfo,
    arch_spec,
    counted_scoreboards,
    feature_class,
    freeze,
    supported_sms,
)

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted({arch_spec(sm).family: arch_spec(sm) for sm in supported_sms()}.items())
ALL_OPCODES = {op for _, spec in SPECS for op in spec.table}

#: Modules that decide something per opcode and must take it from the table.
READERS = ["kbuild/sass/deps.py", "kbuild/sass/schedule.py", "kbuild/sass/verify.py", "kbuild/sass/fuzz.py",
           "kbuild/sass/disasm.py", "kbuild/sass/elf.py", "kbuild/sass/cli.py", "kbuild/tune/env.py",
           "kbuild/tune/measure/model.py", "kbuild/tune/measure/cubin.py"]
_OPCODE_LIKE = re.compile(r"[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*")


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


@pytest.mark.parametrize("module", READERS)
def test_no_module_outside_the_table_names_an_opcode(module):
    found = [(line, s) for line, s in _code_strings(ROOT / module)
             if _OPCODE_LIKE.fullmatch(s) and s.split(".")[0] in ALL_OPCODES]
    assert not found, f"{module} names opcodes itself (move the fact into kbuild/sass/isa): {found}"


@pytest.mark.parametrize(("family", "spec"), SPECS, ids=[f for f, _ in SPECS])
def test_every_table_entry_is_consistent(family, spec):
    assert set(spec.latencies) == set(LATENCY_CLASSES)
    for op, info in spec.table.items():
        assert info.latency in LATENCY_CLASSES, op
        if info.ends_block or info.branch:
            assert info.pinned, f"{family} {op}: control flow must be pinned"
        if info.branch:
            assert info.ends_block, op
        if info.predicate_field:
            assert info.implicit_reads or info.implicit_writes, op
        if info.space is not None:
            assert info.mem_read or info.mem_write, op
    assert spec.lookup("BRA").branch and spec.lookup("EXIT").ends_block and not spec.lookup("EXIT").branch
    assert spec.lookup("DEPBAR").counts_scoreboards
    assert spec.lookup("P2R").predicate_field == spec.lookup("R2P").predicate_field == "PR"
    assert spec.nvinfo.name(0x1C) == "EXIT_INSTR_OFFSETS" and spec.nvinfo.name(0x99) == "0x99"
    assert spec.nvdisasm_arch(spec.sms[0]).startswith(f"SM{spec.sms[0]}")


def test_per_architecture_facts():
    sm80, sm90 = arch_spec(80), arch_spec(90)
    assert sm90.nvdisasm_arch(90) == "SM90a" and sm80.nvdisasm_arch(86) == "SM86"
    assert sm90.latency_class("HGMMA") == "tensor" and sm80.latency_class("HGMMA") == "fixed"  # no wgmma on sm_80
    assert sm80.latency_class("LDG") == "global" and sm80.latency_class("LDSM") == "shared"
    assert sm80.latency_class("FROBNICATE") == "fixed"


@pytest.mark.parametrize(("operands", "mask"), [
    (("SB0", "0x1"), 0b1), (("SB5", "0x0"), 0b100000), (("{5,4,3}",), 0b111000), (("0x1",), None),
])
def test_depbar_operand_forms(operands, mask):
    assert counted_scoreboards(operands) == mask


def test_feature_classes():
    t = arch_spec(90)
    assert feature_class(t.lookup("HMMA"), mem_read=False, mem_write=False, sets_barrier=True) == "tensor"
    assert feature_class(t.lookup("LDSM"), mem_read=True, mem_write=False, sets_barrier=True) == "load"
    assert feature_class(t.lookup("STS"), mem_read=False, mem_write=True, sets_barrier=False) == "store"
    assert feature_class(t.lookup("FADD"), mem_read=False, mem_write=False, sets_barrier=False) == "alu"
    assert feature_class(None, mem_read=False, mem_write=False, sets_barrier=True) == "other"
    assert set(FEATURE_CLASSES) == {"load", "store", "tensor", "alu", "other"}


def test_a_new_opcode_fact_is_one_table_entry(monkeypatch):
    """One entry teaches the dependency model, the block structure, the cost model and the features."""
    from kbuild.sass import isa
    from kbuild.tune.measure.model import latency_class

    lines = ["[B-:R-:W-:Y:S02] MOV R40, RZ", "[B-:R-:W0:Y:S02] FROB.X R4, R2", "[B-:R-:W-:Y:S02] MOV R41, RZ",
             "[B-:R-:W-:Y:S02] EXIT"]
    assert build(lines).sems[P + 1].pinned == "opcode FROB not in the sm_90 table"
    spec = arch_spec(90)
    frob = OpInfo(cap=64, variable=True, latency="global", tensor=True)
    taught = replace(spec, table=freeze({**spec.table, "FROB": frob}))
    monkeypatch.setattr(isa, "_REGISTRY", {**isa._specs(), 90: taught})
    an = build(lines)
    assert an.sems[P + 1].pinned is None and an.sems[P + 1].writes == 1 << 4
    assert latency_class("FROB.X", arch_spec(90)) == "global"
    assert feature_class(arch_spec(90).lookup("FROB"), mem_read=False, mem_write=False, sets_barrier=True) == "tensor"
    # and as control flow it splits the block, as a branch it closes loops
    jump = replace(spec, table=freeze({**spec.table, "FROB": OpInfo(outs="", pinned="control flow", ends_block=True,
                                                                    branch=True)}))
    monkeypatch.setattr(isa, "_REGISTRY", {**isa._specs(), 90: jump})
    loop = ["[B-:R-:W-:Y:S02] MOV R40, RZ", "[B-:R-:W-:Y:S02] MOV R41, RZ", "[B-:R-:W-:Y:S02] FROB 0x50",
            "[B-:R-:W-:Y:S02] EXIT"]
    an = build(loop)
    assert an.block_of[P + 2] != an.block_of[P + 1] and (P, P + 3) in an.loops()


def test_the_verifier_does_not_import_the_move_code():
    """verify.py's docstring promises independence from the move code; hold it to that."""
    tree = ast.parse((ROOT / "kbuild/sass/verify.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[-1])
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.name.split(".")[-1] for a in node.names)
    assert not imported & {"schedule", "Schedule", "fuzz"}, imported
