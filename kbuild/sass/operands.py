"""Operand classification and register extraction for one decoded instruction.

Registers are numbered in one space: R0–R255 → 0–255, UR0–UR63 → 256–319, P0–P7 → 320–327,
UP0–UP7 → 328–335. Register sets are Python ``int`` bit masks. RZ, URZ, PT and UPT are not registers.
"""

from __future__ import annotations

import re

R_BASE, UR_BASE, P_BASE, UP_BASE, NREGS = 0, 256, 320, 328, 336
ALL_P = ((1 << 7) - 1) << P_BASE  # P0–P6
ALL_UP = ((1 << 7) - 1) << UP_BASE

_TOKEN = re.compile(r"(?<![A-Za-z0-9_])(UR|UP|R|P)(\d+)((?:\.[A-Za-z0-9_]+)*)")
_PLAIN_REG = re.compile(r"^(UR\d+|URZ|R\d+|RZ)((?:\.(?:64|128|reuse))*)$")
_PLAIN_PRED = re.compile(r"^(UP\d|UPT|P\d|PT)$")

_REG_OPERAND = re.compile(
    r"^[-!~]?\|?-?(?:UR\d+|URZ|R\d+|RZ|UP\d|UPT|P\d|PT)(?:\.[A-Za-z0-9_]+)*\|?(?:\.reuse)?$")
_IMM = re.compile(
    r"^[-+]?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|INF|QNAN|NAN|\+INF|-INF)(?:\.[A-Z0-9_]+)?$")
_CONST = re.compile(r"^[-!~]?\|?-?c\[0x[0-9a-f]+\]\[[^\[\]]+\](?:\.[A-Za-z0-9_]+)*\|?$")
_MEM = re.compile(r"^(?:desc\[[^\[\]]+\])?\[[^\[\]]*\]$")
_SPECIAL = re.compile(r"^(SR_[A-Za-z0-9_.]+|SRZ)$")

#: Special registers that are plain per-thread/per-CTA values (safe to read anywhere in a block).
SAFE_SPECIALS = re.compile(
    r"^(SRZ|SR_TID(\.[XYZ])?|SR_CTAID\.[XYZ]|SR_LANEID|SR_CgaCtaId|SR_NTID(\.[XYZ])?|SR_NCTAID\.[XYZ]|"
    r"SR_(EQ|LT|LE|GT|GE)MASK|SR_SWINHI|SR_SWINLO|SR_VIRTID|SR_CLUSTERID\.[XYZ]|SR_CLUSTER_CTAID\.[XYZ]|"
    r"SR_CTARANK|SR_CLUSTER_CTARANK)$")


def width_from_mods(mods: tuple[str, ...]) -> int:
    if "128" in mods:
        return 4
    if any(m in ("64", "WIDE", "F64", "S64", "U64") for m in mods):
        return 2
    return 1


def reg_bits(kind: str, idx: int, width: int) -> int:
    if kind == "R":
        base, limit = R_BASE, 255
    elif kind == "UR":
        base, limit = UR_BASE, 63
    elif kind == "P":
        base, limit = P_BASE, 7
    else:
        base, limit = UP_BASE, 7
    bits = 0
    for k in range(idx, min(idx + width, limit + 1)):
        bits |= 1 << (base + k)
    return bits


def shape(operand: str) -> str | None:
    """``reg``, ``imm``, ``const``, ``mem``, ``special`` or None when we do not recognise it."""
    if _REG_OPERAND.match(operand):
        return "reg"
    if _IMM.match(operand):
        return "imm"
    if _CONST.match(operand):
        return "const"
    if _MEM.match(operand):
        return "mem"
    if _SPECIAL.match(operand):
        return "special"
    return None


def is_plain_reg(operand: str) -> bool:
    return bool(_PLAIN_REG.match(operand))


def is_plain_pred(operand: str) -> bool:
    return bool(_PLAIN_PRED.match(operand))


def registers(operand: str, width: int, *, bracket_min: int = 1) -> int:
    """Bit mask of the registers ``operand`` names; ``width`` registers each (more for ``.64``/``.128``).

    Inside a memory or constant operand, registers get at least ``bracket_min``; inside ``desc[...]``
    at least 2 (a 64-bit descriptor pair)."""
    bits = 0
    in_bracket = "[" in operand
    for m in _TOKEN.finditer(operand):
        kind, idx, suffix = m.group(1), int(m.group(2)), m.group(3)
        w = 1 if kind in ("P", "UP") else width
        if kind not in ("P", "UP"):
            if ".128" in suffix:
                w = max(w, 4)
            elif ".64" in suffix:
                w = max(w, 2)
            if in_bracket:
                w = max(w, bracket_min)
                if operand.startswith("desc[") and m.start() < operand.index("]"):
                    w = max(w, 2)
        bits |= reg_bits(kind, idx, w)
    return bits


def describe(bits: int) -> str:
    names = []
    for b in range(NREGS):
        if bits >> b & 1:
            if b < UR_BASE:
                names.append(f"R{b}")
            elif b < P_BASE:
                names.append(f"UR{b - UR_BASE}")
            elif b < UP_BASE:
                names.append(f"P{b - P_BASE}")
            else:
                names.append(f"UP{b - UP_BASE}")
    return ",".join(names)
