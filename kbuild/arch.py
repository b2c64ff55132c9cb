"""Per-architecture facts: one row per GPU architecture kbuild compiles for, and the only module that knows an SM
number.

A row (:class:`Architecture`) says what kbuild relies on about ``sm_<NN>``: the SASS family whose opcode table
applies and the module of :mod:`kbuild.sass.isa` that holds it, the arch-specific suffix Triton and nvdisasm use
(``sm_90a``), the fp8 type Triton has there, whether it has wgmma and TMA, registers per SM, the cycles of each
latency class the cost models use, the GPU its cost models take (:class:`Part`: SMs, shared memory per SM and per
block, tensor-core and memory rates), what one SM can hold (:class:`Limits`: the occupancy calculator's inputs,
from the CUDA C++ Programming Guide's table of technical specifications per compute capability) and the name of
its shipped PPO checkpoint. Everything else asks the table:
the ISA registry, the targets a project names (:mod:`kbuild.targets`), the compile path and the wgmma hazard check,
the cost models of the tuner and of :mod:`kbuild.tile`, the bench suite and the CLI's choices. Per-opcode SASS
semantics are not here: they stay in the ISA tables the rows point to.

**A new architecture is one row here and, for SASS rewriting, one module** ``kbuild/sass/isa/sm<NN>.py``.

A row holds what kbuild uses, not a data sheet: a fact no code reads is left out, and ``None`` says kbuild has not
modelled it (no :class:`Part` for sm_86: its cost models take the default architecture's figures).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: Cycles until a variable-latency result is ready, by latency class (the classes of
#: :data:`kbuild.sass.isa.LATENCY_CLASSES`). Hopper-ish leads, not measurements; the same numbers serve every
#: architecture until one is measured.
LEAD_LATENCIES: Mapping[str, int] = MappingProxyType({
    "fixed": 0,        # fixed-latency ALU: covered by the stall counts
    "constant": 20,    # LDC
    "special": 25,     # S2R, CS2R of clocks
    "mufu": 18,        # MUFU (exp2, rsqrt, ...)
    "shared": 32,      # LDS, LDSM, shared atomics
    "tensor": 40,      # HMMA/HGMMA results
    "global": 500,     # LDG, LDGSTS, ATOMG, TMA
    "local": 500,      # LDL (spills)
    "barrier": 20,     # BAR, fences
    "control": 0,      # branches, EXIT
})


@dataclass(frozen=True)
class Part:
    """The GPU kbuild's cost models take for an architecture (the tuner's level-1 model and :mod:`kbuild.tile`'s
    ranking of tile configurations): what one SM offers, and the whole GPU's DRAM rate per SM cycle."""

    name: str
    sms: int
    """Streaming multiprocessors."""
    shared_per_sm: int
    """Shared memory of one SM, in bytes."""
    shared_per_block: int
    """Shared memory one thread block may use (opted in), in bytes."""
    tensor_flops: int
    """Dense fp16 tensor-core flops per SM per cycle."""
    shared_bandwidth: int
    """Shared-memory bytes per SM per cycle."""
    l2_bandwidth: int
    """L2 → SM bytes per SM per cycle."""
    memory_latency: int
    """Cycles from a global load's issue to its data."""
    dram_bandwidth: int
    """The whole GPU's DRAM bytes per SM cycle."""


#: H100/H200 (the GPU machine's): 4.8 TB/s of DRAM at 1.98 GHz
HOPPER = Part("H100/H200", sms=132, shared_per_sm=228 * 1024, shared_per_block=227 * 1024, tensor_flops=4096,
              shared_bandwidth=128, l2_bandwidth=64, memory_latency=1200, dram_bandwidth=2400)
#: A100: 2.0 TB/s of DRAM at 1.41 GHz
AMPERE = Part("A100", sms=108, shared_per_sm=164 * 1024, shared_per_block=163 * 1024, tensor_flops=2048,
              shared_bandwidth=128, l2_bandwidth=64, memory_latency=800, dram_bandwidth=1400)


@dataclass(frozen=True)
class Limits:
    """What one SM of an architecture can hold at once, and what one thread block may ask for: the inputs of the
    occupancy calculation (registers, warps and shared memory of a block against the SM's), from the CUDA C++
    Programming Guide's "technical specifications per compute capability". Every GPU of the architecture has
    them, unlike a :class:`Part`'s rates."""

    max_warps_per_sm: int
    """Resident warps per SM."""
    max_blocks_per_sm: int
    """Resident thread blocks per SM."""
    shared_per_sm: int
    """Shared memory of one SM, in bytes (the largest carve-out)."""
    shared_per_block: int
    """Shared memory one thread block may use when it opts in (Triton does, for any kernel using more than 48 KB),
    in bytes: Triton refuses to load a kernel asking for more (``OutOfResources``: shared memory)."""
    shared_reserved_per_block: int = 1024
    """Shared memory the CUDA driver reserves for each resident block (from compute capability 8.0 on), in
    bytes."""
    max_threads_per_block: int = 1024
    max_registers_per_thread: int = 255
    register_unit: int = 256
    """Registers are given to a warp in units of this many (a thread's count is rounded up to a multiple of 8)."""
    sub_partitions: int = 4
    """Processing blocks of an SM; each has a quarter of the register file, and a warp's registers come from one."""
    shared_unit: int = 128
    """Shared memory is given to a block in units of this many bytes."""


#: sm_80 (A100) and sm_87 (Orin): 164 KB of shared memory per SM.
_AMPERE_LIMITS = Limits(max_warps_per_sm=64, max_blocks_per_sm=32, shared_per_sm=164 * 1024,
                        shared_per_block=163 * 1024)
_HOPPER_LIMITS = Limits(max_warps_per_sm=64, max_blocks_per_sm=32, shared_per_sm=228 * 1024,
                        shared_per_block=227 * 1024)


@dataclass(frozen=True)
class Architecture:
    """What kbuild knows about one architecture, ``sm_<sm>``."""

    sm: int
    """Compute capability as an integer (90 for sm_90)."""
    family: str
    """The SASS family whose opcode table applies (``sm_80`` covers sm_80/86/87)."""
    isa: str | None = None
    """The module of :mod:`kbuild.sass.isa` with that family's opcode table (``"sm80"``); None: kbuild compiles for
    this architecture but cannot read or rewrite its SASS."""
    specific: str = ""
    """Suffix of the arch-specific variant Triton compiles for and nvdisasm reads (``"a"``: ``sm_90a``, with
    wgmma and TMA), or ``""``."""
    fp8e4nv: bool = False
    """Triton 3.6 has the fp8e4nv type here (``CUDAOptions.supported_fp8_dtypes``: from compute capability 8.9)."""
    wgmma: bool = False
    """Warpgroup-wide asynchronous mma (Hopper's ``wgmma.mma_async``, SASS ``HGMMA``)."""
    tma: bool = False
    """The tensor memory accelerator (bulk tensor copies through a descriptor)."""
    registers_per_sm: int = 65536
    """32-bit registers of one SM (also the most one thread block may use)."""
    limits: Limits | None = None
    """What one SM holds (:class:`Limits`); None: not modelled here (no occupancy and no shared-memory limit is
    checked for this architecture)."""
    clusters: bool = False
    """Thread block clusters: Triton's ``num_ctas`` > 1 (its ``parse_options`` refuses them below compute
    capability 9.0)."""
    latencies: Mapping[str, int] | None = None
    """Cycles of each latency class for the cost models (every class of :data:`kbuild.sass.isa.LATENCY_CLASSES`);
    None without an opcode table (no class to give an instruction)."""
    part: Part | None = None
    """The GPU the cost models take; None: not modelled (the tuner's cost model takes the default
    architecture's, :mod:`kbuild.tile` refuses)."""
    ppo_checkpoint: str | None = None
    """File name of the PPO policy checkpoint for this architecture under ``kbuild/tune/policies/``, used when
    present (:func:`kbuild.tune.policy.default_checkpoint`)."""

    @property
    def name(self) -> str:
        """The user-facing name, ``sm_90``."""
        return f"sm_{self.sm}"

    @property
    def ptxas_name(self) -> str:
        """What Triton has ptxas compile for: the arch-specific variant where there is one, ``sm_90a``."""
        return f"sm_{self.sm}{self.specific}"


def _rows(*rows: Architecture) -> Mapping[int, Architecture]:
    return MappingProxyType({r.sm: r for r in rows})


#: Every architecture Triton 3.6's NVIDIA backend compiles for, by SM number, in ascending order.
TABLE: Mapping[int, Architecture] = _rows(
    Architecture(75, "sm_75"),
    Architecture(80, "sm_80", "sm80", latencies=LEAD_LATENCIES, part=AMPERE, limits=_AMPERE_LIMITS),
    Architecture(86, "sm_80", "sm80", latencies=LEAD_LATENCIES,
                 limits=Limits(max_warps_per_sm=48, max_blocks_per_sm=16, shared_per_sm=100 * 1024,
                               shared_per_block=99 * 1024)),
    Architecture(87, "sm_80", "sm80", latencies=LEAD_LATENCIES,
                 limits=dataclasses.replace(_AMPERE_LIMITS, max_warps_per_sm=48, max_blocks_per_sm=16)),
    Architecture(89, "sm_89", "sm89", fp8e4nv=True, latencies=LEAD_LATENCIES,
                 limits=Limits(max_warps_per_sm=48, max_blocks_per_sm=24, shared_per_sm=100 * 1024,
                               shared_per_block=99 * 1024)),
    Architecture(90, "sm_90", "sm90", "a", fp8e4nv=True, wgmma=True, tma=True, latencies=LEAD_LATENCIES,
                 part=HOPPER, ppo_checkpoint="ppo_suite_sm90.zip", limits=_HOPPER_LIMITS, clusters=True),
    Architecture(100, "sm_100", specific="a", fp8e4nv=True, limits=_HOPPER_LIMITS, clusters=True),
    Architecture(103, "sm_100", specific="a", fp8e4nv=True, limits=_HOPPER_LIMITS, clusters=True),
    Architecture(120, "sm_120", specific="a", fp8e4nv=True, clusters=True,
                 limits=Limits(max_warps_per_sm=48, max_blocks_per_sm=32, shared_per_sm=128 * 1024,
                               shared_per_block=99 * 1024)),
)

#: The architecture kbuild assumes where none is named: the GPU machine's (H100/H200), whose part the cost models
#: take for an architecture they have not modelled.
DEFAULT_SM = 90
#: What a project compiles for when ``[tool.kbuild] targets`` is left out.
DEFAULT_TARGETS = ("sm_80", "sm_90")


class UnknownArchitecture(ValueError):
    """An SM number with no row in :data:`TABLE`."""


def architecture(sm: int) -> Architecture:
    """The row of ``sm_<sm>``; :class:`UnknownArchitecture` naming the known ones otherwise."""
    row = TABLE.get(sm)
    if row is None:
        raise UnknownArchitecture(f"sm_{sm} is not an architecture kbuild knows ({', '.join(names())})")
    return row


def find(sm: int) -> Architecture | None:
    """The row of ``sm_<sm>``, or None (a cubin or a GPU of an architecture the table lacks)."""
    return TABLE.get(sm)


def rows() -> tuple[Architecture, ...]:
    """Every row, ascending. (Readers ask these functions, which read :data:`TABLE` when called.)"""
    return tuple(TABLE.values())


def names() -> list[str]:
    """The user-facing name of every row, ``["sm_75", "sm_80", ...]``."""
    return [r.name for r in TABLE.values()]


def modelled(*facts: str) -> tuple[int, ...]:
    """The SM numbers whose row has a :class:`Part` (and each of ``facts`` true: ``modelled("wgmma", "tma")``),
    ascending: the architectures the cost models of the tuner and :mod:`kbuild.tile`, the bench suite and
    ``kbuild tile --arch`` cover."""
    return tuple(r.sm for r in TABLE.values() if r.part is not None and all(getattr(r, f) for f in facts))


__all__ = ["AMPERE", "DEFAULT_SM", "DEFAULT_TARGETS", "HOPPER", "LEAD_LATENCIES", "TABLE", "Architecture", "Limits", "Part",
           "UnknownArchitecture", "architecture", "find", "modelled", "names", "rows"]
