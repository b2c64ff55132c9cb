"""Disassembly through ``nvdisasm -json``: one :class:`Instruction` per 16-byte word.

nvdisasm's JSON gives each instruction's opcode (with modifiers), its operand string, an optional
predicate and a ``control-flow`` flag. Operand strings are split here at top-level commas, and also
where nvdisasm leaves the comma out between a register and a memory operand (``LDS R45[R23]``,
``RZ[R4]``): that form is what the JSON prints for every load's destination.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kbuild.errors import KBuildError, ToolError
from kbuild.toolchain import run_tool, tool_path

from .elf import Cubin
from .isa import arch_spec

_REG_THEN_BRACKET = re.compile(r"^(!?U?[RP](?:\d+|Z|T))(\[.*\])$")
_REUSE = re.compile(r"\.reuse\b")


@dataclass(frozen=True, slots=True)
class Instruction:
    """One decoded instruction. ``guard`` is ``@P0``/``@!UP1`` or ``''``; ``extra`` holds nvdisasm's
    non-guard predicate field (``PR`` on P2R/R2P)."""

    index: int
    opcode: str
    operands: tuple[str, ...]
    guard: str = ""
    extra: str = ""
    control_flow: bool = False

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])

    @property
    def text(self) -> str:
        """Canonical text with ``.reuse`` removed, e.g. ``@!P0 LDG.E R3, [R12.64]``."""
        ops = ", ".join(_REUSE.sub("", o) for o in self.operands)
        head = f"{self.guard} {self.opcode}" if self.guard else self.opcode
        if self.extra:
            ops = f"{self.extra}, {ops}" if ops else self.extra
        return f"{head} {ops}".rstrip()


def split_operands(s: str) -> tuple[str, ...]:
    """Split nvdisasm's operand string; ``'R45[R23],R7'`` → ``('R45', '[R23]', 'R7')``."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in s:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or parts:
        parts.append("".join(cur).strip())
    out: list[str] = []
    for p in parts:
        m = _REG_THEN_BRACKET.match(p)
        if m:
            out.extend([m.group(1), m.group(2)])
        elif p:
            out.append(p)
    return tuple(out)


def _records(fn: dict) -> list[Instruction]:
    out = []
    for i, rec in enumerate(fn.get("sass-instructions", [])):
        pred = rec.get("predicate", "") or ""
        attrs = rec.get("other-attributes") or {}
        cf = str(attrs.get("control-flow", "")).lower() == "true" if isinstance(attrs, dict) else False
        out.append(Instruction(
            index=i,
            opcode=str(rec.get("opcode", "")),
            operands=split_operands(str(rec.get("operands", "") or "")),
            guard=pred if pred.startswith("@") else "",
            extra="" if pred.startswith("@") else pred,
            control_flow=cf,
        ))
    return out


def _run_json(args: list[str], what: str) -> list:
    out = run_tool("nvdisasm", args, what=what)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError as exc:
        raise ToolError(what, [str(tool_path("nvdisasm")), *args], 0,
                        f"nvdisasm printed output that is not JSON ({exc}):\n{out[:2000]}") from None
    if not isinstance(doc, list) or len(doc) < 2 or not isinstance(doc[1], list):
        raise ToolError(what, [str(tool_path("nvdisasm")), *args], 0, f"unexpected JSON layout:\n{out[:2000]}")
    return doc


def _with_temp(data: bytes, suffix: str):
    fd, name = tempfile.mkstemp(suffix=suffix, prefix="kbuild-sass-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return Path(name)


def disassemble(cubin: Cubin, kernel: str) -> list[Instruction]:
    """Disassemble ``.text.<kernel>``; the result has exactly one entry per 16-byte word."""
    text = cubin.text(kernel)
    path = _with_temp(cubin.data, ".cubin")
    try:
        doc = _run_json(["-json", str(path)], f"nvdisasm (disassembling {cubin.origin})")
    finally:
        path.unlink(missing_ok=True)
    for fn in doc[1]:
        if fn.get("function-name") == kernel:
            ins = _records(fn) + _internal_subroutines(doc[1], fn, text.size)
            if len(ins) != text.size // 16:
                raise KBuildError(f"{cubin.origin}: nvdisasm listed {len(ins)} instructions for {kernel} but "
                                  f".text.{kernel} holds {text.size // 16} words; cannot align them")
            return ins
    raise KBuildError(f"{cubin.origin}: nvdisasm printed no function named {kernel}")


def _internal_subroutines(functions: list, kernel: dict, size: int) -> list[Instruction]:
    """The instructions of the subroutines ptxas placed inside the kernel's own section (nvcc's
    ``$__internal_0_$__cuda_sm20_div_u64`` after a 64-bit division: nvdisasm lists them as functions of their own
    whose ``start`` lies within the kernel's ``length``), in address order, each marked as control flow so that
    nothing moves in them or across them. Empty unless they continue the kernel's listing word for word."""
    start, length = kernel.get("start"), kernel.get("length")
    if not isinstance(start, int) or not isinstance(length, int) or length != size:
        return []
    inner = sorted((f for f in functions if f is not kernel and str(f.get("function-name", "")).startswith("$__internal")
                    and isinstance(f.get("start"), int) and start < f["start"] < start + length),
                   key=lambda f: f["start"])
    out: list[Instruction] = []
    at = start + 16 * len(kernel.get("sass-instructions") or [])
    for f in inner:
        if f["start"] != at:
            return []
        recs = [dataclasses.replace(i, control_flow=True) for i in _records(f)]
        out.extend(recs)
        at += 16 * len(recs)
    return out


def raw_arch_name(sm: int) -> str:
    """nvdisasm's ``-b`` name for ``sm_<sm>`` code (the ISA table's, e.g. ``SM90a``)."""
    return arch_spec(sm).nvdisasm_arch(sm)


def disassemble_raw(blobs: list[bytes], sm: int) -> list[list[Instruction]]:
    """Disassemble raw instruction blobs in one nvdisasm call (``--binary``), blob ``k`` at base
    address ``sum(len(blobs[:k]))``. Branch targets print as absolute addresses."""
    data = b"".join(blobs)
    if not data:
        return [[] for _ in blobs]
    path = _with_temp(data, ".bin")
    try:
        doc = _run_json(["-b", raw_arch_name(sm), "-json", str(path)], "nvdisasm --binary")
    finally:
        path.unlink(missing_ok=True)
    ins: list[Instruction] = []
    for fn in doc[1]:
        ins.extend(_records(fn))
    if len(ins) != len(data) // 16:
        raise KBuildError(f"nvdisasm --binary listed {len(ins)} instructions for {len(data) // 16} words")
    out, pos = [], 0
    for b in blobs:
        n = len(b) // 16
        out.append(ins[pos:pos + n])
        pos += n
    return out
