"""Opcode table for the sm_80 family (A100; the same encoding on sm_86/87)."""

from __future__ import annotations

from dataclasses import replace

from . import LONG_CAP, MODS, ArchSpec, NvInfoAttrs, OpInfo, freeze, frozen_map

R = OpInfo()  # one 32-bit result, fixed-latency ALU
R_MODS = OpInfo(out_width=MODS, src_width=MODS)
SETP = OpInfo(outs="P,P")
CARRY = OpInfo(outs="R,P*", out_width=MODS, src_width=MODS)  # IADD3/LEA/IMAD may write carry predicates
CONV = OpInfo(out_width=MODS, src_width=MODS, cap=LONG_CAP, variable=True)
VAR = OpInfo(cap=LONG_CAP, variable=True)
LONGR = OpInfo(cap=LONG_CAP)  # fixed latency, but on a pipe whose latency we do not pin down

_MEM_PIN = ("STRONG", "VOLATILE", "MMIO", "SYS", "GPU", "ACQUIRE", "RELEASE", "MMA")


def _load(space: str, width: int = MODS, latency: str | None = None, tensor: bool = False) -> OpInfo:
    return OpInfo(out_width=width, src_width=2, space=space, mem_read=True, cap=LONG_CAP,
                  pin_modifiers=_MEM_PIN, variable=True, latency=latency or space, tensor=tensor)


def ldsm_count(mods: tuple[str, ...]) -> int:
    """Registers an ``LDSM`` writes per thread: the number of 8 × 8 matrices, ``.2`` or ``.4`` (PTX ldmatrix
    ``.x2``/``.x4``), one without (``.x1``; ``LDSM.16.MT88 R118`` is ``ldmatrix.x1.trans``). The table's entry
    keeps width 4 for every LDSM (the rewriter over-approximates) and this as its ``exact_out_width``, which the
    wgmma hazard check (:mod:`kbuild.sass.hazards`) reads through ``semantics(..., exact=True)``."""
    return 4 if "4" in mods else 2 if "2" in mods else 1


def _store(space: str, width: int = MODS, latency: str | None = None) -> OpInfo:
    return OpInfo(outs="", src_width=width, space=space, mem_write=True, cap=LONG_CAP,
                  pin_modifiers=_MEM_PIN, variable=True, latency=latency or space)


def _pin(reason: str, latency: str = "fixed", *, tensor: bool = False, counts_scoreboards: bool = False,
         polls: bool = False) -> OpInfo:
    return OpInfo(outs="", pinned=reason, latency=latency, tensor=tensor, counts_scoreboards=counts_scoreboards,
                  polls=polls)


def _flow(latency: str = "fixed", *, branch: bool = False, exits: bool = False) -> OpInfo:
    """Control flow: pinned, and a basic block of its own."""
    return OpInfo(outs="", pinned="control flow", latency=latency, ends_block=True, branch=branch, exits=exits)


TABLE: dict[str, OpInfo] = {
    # --- integer / logic ALU
    "IADD3": CARRY, "IMAD": CARRY, "LEA": CARRY, "IADD": CARRY,
    "UIADD3": CARRY, "UIMAD": CARRY, "ULEA": CARRY,
    "LOP3": OpInfo(outs="P?,R"), "ULOP3": OpInfo(outs="P?,R"), "LOP": R, "ULOP": R,
    "PLOP3": OpInfo(outs="P,P"), "UPLOP3": OpInfo(outs="P,P"),
    "ISETP": SETP, "UISETP": SETP, "FSETP": SETP, "HSETP2": SETP, "DSETP": OpInfo(outs="P,P", src_width=2, cap=LONG_CAP, variable=True),
    "SHF": R_MODS, "USHF": R_MODS, "SHL": R, "SHR": R, "SGXT": R, "USGXT": R, "PRMT": R, "UPRMT": R,
    "IABS": R, "IMNMX": R, "UIMNMX": R, "VIADD": R, "VIMNMX": R, "BMSK": R, "UBMSK": R, "BREV": VAR, "UBREV": VAR,
    "FLO": VAR, "UFLO": VAR, "POPC": VAR, "UPOPC": VAR, "SEL": R, "USEL": R, "FSEL": R, "MOV": R_MODS, "UMOV": R_MODS,
    "IDP": R, "IMUL": R_MODS, "LEPC": _pin("position-dependent (reads the program counter)"),
    # --- float ALU
    "FADD": R, "FMUL": R, "FFMA": R, "FMNMX": R, "FCHK": OpInfo(outs="P"), "FSWZADD": R, "FRND": CONV,
    "HADD2": LONGR, "HMUL2": LONGR, "HFMA2": LONGR, "HMNMX2": LONGR, "F2FP": LONGR,
    "DADD": OpInfo(out_width=2, src_width=2, cap=LONG_CAP, variable=True),
    "DMUL": OpInfo(out_width=2, src_width=2, cap=LONG_CAP, variable=True),
    "DFMA": OpInfo(out_width=2, src_width=2, cap=LONG_CAP, variable=True),
    "F2F": CONV, "F2I": CONV, "I2F": CONV, "I2FP": CONV, "F2IP": CONV, "I2I": CONV,
    "MUFU": replace(VAR, latency="mufu"),
    # --- tensor cores (all operands over-approximated to 4 registers)
    "HMMA": OpInfo(out_width=4, src_width=4, cap=LONG_CAP, pin_modifiers=("SP",), latency="tensor", tensor=True),
    "IMMA": _pin("tensor core (integer MMA; fragment widths not in the table)", "tensor", tensor=True),
    "DMMA": _pin("tensor core (fp64 MMA; fragment widths not in the table)", "tensor", tensor=True),
    # --- moves between files, special registers, constants
    "S2R": OpInfo(special_ok=True, cap=LONG_CAP, variable=True, latency="special"),
    "S2UR": OpInfo(special_ok=True, cap=LONG_CAP, variable=True, latency="special"),
    "CS2R": OpInfo(out_width=2, special_ok=True, cap=LONG_CAP, latency="special"),
    "R2UR": VAR, "LDC": OpInfo(out_width=MODS, src_width=2, cap=LONG_CAP, variable=True, latency="constant"),
    "ULDC": OpInfo(out_width=MODS, src_width=2, cap=LONG_CAP, latency="constant"),
    "P2R": OpInfo(implicit_reads=("P*",), predicate_field="PR"),
    "R2P": OpInfo(outs="", implicit_writes=("P*",), predicate_field="PR"),
    "SHFL": OpInfo(outs="P,R", cap=LONG_CAP, variable=True),
    # --- memory
    "LDG": _load("global"), "STG": _store("global"),
    "LDS": _load("shared"), "STS": _store("shared"),
    "LDSM": replace(_load("shared", width=4, tensor=True), exact_out_width=ldsm_count), "STSM": _store("shared", width=4),
    "LDL": _load("local"), "STL": _store("local"),
    "LD": _load("unknown", latency="global"), "ST": _store("unknown", latency="global"),
    # --- pinned: control flow, synchronisation, fences, async copies, atomics, warp-wide votes
    "NOP": _pin("NOP (padding/timing)", "control"),
    "BRA": _flow("control", branch=True), "BRX": _flow("control"), "JMP": _flow("control"),
    "JMX": _flow(), "CALL": _flow("control"), "RET": _flow("control", exits=True),
    "EXIT": _flow("control", exits=True), "BSSY": _flow("control"), "BSYNC": _flow("control"),
    "BREAK": _flow(), "WARPSYNC": _flow("barrier"), "BPT": _flow(),
    "KILL": _flow(), "BMOV": _flow(),
    "YIELD": _pin("control flow", polls=True),  # a scheduling hint: pinned, but it does not split its basic block
    "BAR": _pin("barrier", "barrier"), "MEMBAR": _pin("fence", "barrier"), "FENCE": _pin("fence", "barrier"),
    "ERRBAR": _pin("fence", "barrier"),
    "CCTL": _pin("cache control", "global"), "CCTLL": _pin("cache control"),
    "DEPBAR": _pin("scoreboard barrier", "barrier", counts_scoreboards=True),
    "LDGDEPBAR": _pin("async-copy group barrier"), "LDGSTS": _pin("async copy (global→shared)", "global"),
    "ARRIVES": _pin("async-copy arrive", "barrier"), "ATOM": _pin("atomic", "global", polls=True),
    "ATOMG": _pin("atomic", "global", polls=True), "ATOMS": _pin("atomic", "shared", polls=True), "RED": _pin("atomic", "global"),
    "REDG": _pin("atomic", "global"), "REDUX": _pin("warp-wide"),
    "VOTE": _pin("warp-wide (vote)"), "VOTEU": _pin("warp-wide (vote; nv.info 0x31)"),
    "MATCH": _pin("warp-wide"), "NANOSLEEP": _pin("timing", polls=True), "PMTRIG": _pin("profiling"),
    "SULD": _pin("surface memory", "global"), "SUST": _pin("surface memory", "global"),
    "TEX": _pin("texture", "global"), "TLD": _pin("texture", "global"), "TLD4": _pin("texture"),
    "TXQ": _pin("texture"),
}

#: nv.info attributes (:mod:`kbuild.sass.elf` reads them). Seen on sm_80 and sm_90 cubins of Triton 3.6, or documented.
NVINFO = NvInfoAttrs(
    offset_lists=frozen_map({
        0x1C: "EXIT_INSTR_OFFSETS",
        0x1D: "S2RCTAID_INSTR_OFFSETS",
        0x25: "LD_CACHEMOD_INSTR_OFFSETS",
        0x27: "ATOM_SYS_INSTR_OFFSETS",
        0x28: "COOP_GROUP_INSTR_OFFSETS",
        0x31: "INT_WARP_WIDE_INSTR_OFFSETS",
        0x47: "SW_WAR_MEMBAR_SYS_INSTR_OFFSETS",
        0x57: "STACK_CANARY_TRAP_OFFSETS",
        0x59: "LOCAL_CTA_ASYNC_STORE_OFFSETS",
    }),
    offset_records=frozen_map({
        0x34: "INDIRECT_BRANCH_TARGETS",
        0x39: "MBARRIER_INSTR_OFFSETS",
        0x55: "SPILL_STORE_OFFSETS (pairs)",
    }),
    no_offsets=frozen_map({
        0x0A: "PARAM_CBANK", 0x10: "MAX_THREADS", 0x11: "FRAME_SIZE", 0x12: "MIN_STACK_SIZE",
        0x17: "KPARAM_INFO", 0x19: "CBANK_PARAM_SIZE", 0x1B: "MAXREG_COUNT", 0x23: "MAX_STACK_SIZE",
        0x2F: "REGCOUNT", 0x37: "CUDA_API_VERSION",
    }),
    branch_targets=frozenset({0x34}),
)

SPEC = ArchSpec(family="sm_80", table=freeze(TABLE), nvinfo=NVINFO)
