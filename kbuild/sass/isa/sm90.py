"""Opcode table for the sm_90 family (H100/H200): sm_80's table plus Hopper's asynchronous operations,
which stay pinned until each has a rule tested on the GPU."""

from __future__ import annotations

from . import ArchSpec, OpInfo, freeze
from .sm80 import SPEC as SM80
from .sm80 import TABLE as SM80_TABLE


def _pin(reason: str, latency: str = "fixed", *, tensor: bool = False, polls: bool = False) -> OpInfo:
    return OpInfo(outs="", pinned=reason, latency=latency, tensor=tensor, polls=polls)


TABLE: dict[str, OpInfo] = {
    **SM80_TABLE,
    "HGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "QGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "IGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "BGMMA": _pin("Hopper async (wgmma)", "tensor", tensor=True),
    "WARPGROUP": _pin("Hopper async (warpgroup arrive/depbar)"),
    "SYNCS": _pin("Hopper async (mbarrier)", "barrier", polls=True), "UTMALDG": _pin("Hopper async (TMA)", "global"),
    "UTMASTG": _pin("Hopper async (TMA)", "global"), "UTMAPF": _pin("Hopper async (TMA)"),
    "UTMACCTL": _pin("Hopper async (TMA)"), "UTMACMDFLUSH": _pin("Hopper async (TMA)"),
    "UBLKCP": _pin("Hopper async (bulk copy)", "global"), "UBLKRED": _pin("Hopper async (bulk copy)"),
    "UBLKPF": _pin("Hopper async (bulk copy)"), "ELECT": _pin("Hopper (elect)"),
    "USETMAXREG": _pin("Hopper (register reallocation)"), "ACQBULK": _pin("Hopper async"),
    "FENCE": _pin("fence", "barrier"), "UCGABAR_ARV": _pin("cluster barrier"),
    "UCGABAR_WAIT": _pin("cluster barrier"), "MEMBAR": _pin("fence", "barrier"),
    "STAS": _pin("distributed shared memory"),
}

SPEC = ArchSpec(family="sm_90", sms=(90,), table=freeze(TABLE), nvinfo=SM80.nvinfo, latencies=SM80.latencies,
                nvdisasm_suffix="a")
