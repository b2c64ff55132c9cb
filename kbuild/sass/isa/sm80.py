"""Opcode table for the sm_80 family (A100, and the same encoding on sm_86/87/89)."""

from __future__ import annotations

from . import LONG_CAP, MODS, ArchSpec, OpInfo, freeze

R = OpInfo()  # one 32-bit result, fixed-latency ALU
R_MODS = OpInfo(out_width=MODS, src_width=MODS)
SETP = OpInfo(outs="P,P")
CARRY = OpInfo(outs="R,P*", out_width=MODS, src_width=MODS)  # IADD3/LEA/IMAD may write carry predicates
CONV = OpInfo(out_width=MODS, src_width=MODS, cap=LONG_CAP, variable=True)
VAR = OpInfo(cap=LONG_CAP, variable=True)
LONGR = OpInfo(cap=LONG_CAP)  # fixed latency, but on a pipe whose latency we do not pin down

_MEM_PIN = ("STRONG", "VOLATILE", "MMIO", "SYS", "GPU", "ACQUIRE", "RELEASE", "MMA")


def _load(space: str, width: int = MODS) -> OpInfo:
    return OpInfo(out_width=width, src_width=2, space=space, mem_read=True, cap=LONG_CAP,
                  pin_modifiers=_MEM_PIN, variable=True)


def _store(space: str, width: int = MODS) -> OpInfo:
    return OpInfo(outs="", src_width=width, space=space, mem_write=True, cap=LONG_CAP,
                  pin_modifiers=_MEM_PIN, variable=True)


def _pin(reason: str) -> OpInfo:
    return OpInfo(outs="", pinned=reason)


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
    "F2F": CONV, "F2I": CONV, "I2F": CONV, "I2FP": CONV, "F2IP": CONV, "I2I": CONV, "MUFU": VAR,
    # --- tensor cores (all operands over-approximated to 4 registers)
    "HMMA": OpInfo(out_width=4, src_width=4, cap=LONG_CAP, pin_modifiers=("SP",)),
    # --- moves between files, special registers, constants
    "S2R": OpInfo(special_ok=True, cap=LONG_CAP, variable=True),
    "S2UR": OpInfo(special_ok=True, cap=LONG_CAP, variable=True),
    "CS2R": OpInfo(out_width=2, special_ok=True, cap=LONG_CAP),
    "R2UR": VAR, "LDC": OpInfo(out_width=MODS, src_width=2, cap=LONG_CAP, variable=True),
    "ULDC": OpInfo(out_width=MODS, src_width=2, cap=LONG_CAP),
    "P2R": OpInfo(implicit_reads=("P*",)), "R2P": OpInfo(outs="", implicit_writes=("P*",)),
    "SHFL": OpInfo(outs="P,R", cap=LONG_CAP, variable=True),
    # --- memory
    "LDG": _load("global"), "STG": _store("global"),
    "LDS": _load("shared"), "STS": _store("shared"),
    "LDSM": _load("shared", width=4), "STSM": _store("shared", width=4),
    "LDL": _load("local"), "STL": _store("local"),
    "LD": _load("unknown"), "ST": _store("unknown"),
    # --- pinned: control flow, synchronisation, fences, async copies, atomics, warp-wide votes
    "NOP": _pin("NOP (padding/timing)"),
    "BRA": _pin("control flow"), "BRX": _pin("control flow"), "JMP": _pin("control flow"),
    "JMX": _pin("control flow"), "CALL": _pin("control flow"), "RET": _pin("control flow"),
    "EXIT": _pin("control flow"), "BSSY": _pin("control flow"), "BSYNC": _pin("control flow"),
    "BREAK": _pin("control flow"), "WARPSYNC": _pin("control flow"), "BPT": _pin("control flow"),
    "KILL": _pin("control flow"), "YIELD": _pin("control flow"), "BMOV": _pin("control flow"),
    "BAR": _pin("barrier"), "MEMBAR": _pin("fence"), "FENCE": _pin("fence"), "ERRBAR": _pin("fence"),
    "CCTL": _pin("cache control"), "CCTLL": _pin("cache control"), "DEPBAR": _pin("scoreboard barrier"),
    "LDGDEPBAR": _pin("async-copy group barrier"), "LDGSTS": _pin("async copy (global→shared)"),
    "ARRIVES": _pin("async-copy arrive"), "ATOM": _pin("atomic"), "ATOMG": _pin("atomic"),
    "ATOMS": _pin("atomic"), "RED": _pin("atomic"), "REDG": _pin("atomic"), "REDUX": _pin("warp-wide"),
    "VOTE": _pin("warp-wide (vote)"), "VOTEU": _pin("warp-wide (vote; nv.info 0x31)"),
    "MATCH": _pin("warp-wide"), "NANOSLEEP": _pin("timing"), "PMTRIG": _pin("profiling"),
    "SULD": _pin("surface memory"), "SUST": _pin("surface memory"), "TEX": _pin("texture"),
    "TLD": _pin("texture"), "TLD4": _pin("texture"), "TXQ": _pin("texture"),
}

SPEC = ArchSpec(family="sm_80", sms=(80, 86, 87, 89), table=freeze(TABLE), raw_name="SM80")
