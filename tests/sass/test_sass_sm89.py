"""The sm_89 (Ada) table, added as one module (kbuild/sass/isa/sm89.py), and the registry that finds it."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import pytest

from kbuild.cli import main
from kbuild.sass import Schedule
from kbuild.sass.fuzz import fuzz
from kbuild.sass.isa import arch_spec

ARCH = Path(__file__).resolve().parents[1] / "fixtures" / "cubins"
HOPPER_ONLY = ("HGMMA", "QGMMA", "WARPGROUP", "SYNCS", "UTMALDG", "UTMASTG", "UBLKCP", "ELECT", "USETMAXREG")


def test_sm89_is_ada_not_ampere_and_not_hopper():
    ada, ampere = arch_spec(89), arch_spec(80)
    assert ada.family == "sm_89" and ada.sms == (89,) and 89 not in ampere.sms
    assert ada.nvdisasm_arch(89) == "SM89"
    for op in HOPPER_ONLY:  # no wgmma, no TMA, no mbarrier, no warpgroups
        assert ada.lookup(op) is None, op
    qmma = ada.lookup("QMMA")
    assert qmma is not None and qmma.pinned and qmma.tensor and qmma.latency == "tensor"
    assert ampere.lookup("QMMA") is None
    assert {k: v for k, v in ada.table.items() if k != "QMMA"} == dict(ampere.table)


def test_an_fp8_kernel_for_ada_has_no_unknown_opcode(capsys):
    rc = main(["sass", "stats", str(ARCH / "fp8_dot.sm89.cubin"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["family"] == "sm_89" and doc["sm"] == 89
    assert doc["unknown_opcodes"] == {}  # QMMA was unknown while sm_89 borrowed sm_80's table
    assert doc["opcodes"]["QMMA"] > 0
    assert doc["pinned_reasons"]["tensor core (Ada fp8 MMA; no rule tested on a GPU yet)"] == doc["opcodes"]["QMMA"]


@pytest.mark.parametrize("name", ["softmax.sm89", "fp8_dot.sm89", "softmax.sm86"])
def test_cpu_fuzz_on_ada_and_ampere_cubins(name):
    s = Schedule.from_cubin(ARCH / f"{name}.cubin")
    res = fuzz(s, sequences=100, max_depth=32, seed=5, full_checks=1)
    assert res["mismatches"] == 0 and res["verifier_rejections"] == 0 and res["verified"] == 100, res["examples"]
    assert res["moves"] > 100


def test_a_new_architecture_is_one_module_and_one_row(tmp_path, monkeypatch):
    """Drop ``sm<NN>.py`` with a SPEC into the package and its row into the architecture table: the registry serves
    it, nothing else changes."""
    from kbuild import arch
    from kbuild.sass import isa

    pkg = tmp_path / "isa_extra"
    pkg.mkdir()
    (pkg / "sm101.py").write_text(textwrap.dedent("""
        from kbuild.sass.isa import ArchSpec, freeze
        from kbuild.sass.isa.sm90 import SPEC as SM90
        SPEC = ArchSpec(family="sm_101", table=freeze(dict(SM90.table)), nvinfo=SM90.nvinfo)
    """))
    monkeypatch.setattr(isa, "__path__", [*isa.__path__, str(pkg)])
    row = dataclasses.replace(arch.architecture(90), sm=101, family="sm_101", isa="sm101")
    monkeypatch.setattr(arch, "TABLE", {**arch.TABLE, 101: row})
    monkeypatch.setattr(isa, "_REGISTRY", None)
    try:
        assert arch_spec(101).family == "sm_101" and 101 in isa.supported_sms()
        assert arch_spec(89).family == "sm_89" and arch_spec(90).family == "sm_90"
    finally:
        sys.modules.pop("kbuild.sass.isa.sm101", None)


def test_targets_name_the_same_family_as_the_isa_registry():
    from kbuild.sass.isa import supported_sms
    from kbuild.targets import Target

    for sm in supported_sms():
        assert Target(sm).family == arch_spec(sm).family, sm
