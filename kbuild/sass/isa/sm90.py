"""Opcode table for the sm_90 family (H100/H200): sm_80's table plus Hopper's asynchronous operations,
which stay pinned until each has a rule tested on the GPU."""

from __future__ import annotations

from . import ArchSpec, OpInfo, freeze
from .sm80 import TABLE as SM80_TABLE


def _pin(reason: str) -> OpInfo:
    return OpInfo(outs="", pinned=reason)


TABLE: dict[str, OpInfo] = {
    **SM80_TABLE,
    "HGMMA": _pin("Hopper async (wgmma)"), "QGMMA": _pin("Hopper async (wgmma)"),
    "IGMMA": _pin("Hopper async (wgmma)"), "BGMMA": _pin("Hopper async (wgmma)"),
    "WARPGROUP": _pin("Hopper async (warpgroup arrive/depbar)"),
    "SYNCS": _pin("Hopper async (mbarrier)"), "UTMALDG": _pin("Hopper async (TMA)"),
    "UTMASTG": _pin("Hopper async (TMA)"), "UTMAPF": _pin("Hopper async (TMA)"),
    "UTMACCTL": _pin("Hopper async (TMA)"), "UTMACMDFLUSH": _pin("Hopper async (TMA)"),
    "UBLKCP": _pin("Hopper async (bulk copy)"), "UBLKRED": _pin("Hopper async (bulk copy)"),
    "UBLKPF": _pin("Hopper async (bulk copy)"), "ELECT": _pin("Hopper (elect)"),
    "USETMAXREG": _pin("Hopper (register reallocation)"), "ACQBULK": _pin("Hopper async"),
    "FENCE": _pin("fence"), "UCGABAR_ARV": _pin("cluster barrier"), "UCGABAR_WAIT": _pin("cluster barrier"),
    "MEMBAR": _pin("fence"), "STAS": _pin("distributed shared memory"),
}

SPEC = ArchSpec(family="sm_90", sms=(90,), table=freeze(TABLE), raw_name="SM90a")
