"""The cost model: a CPU-only static estimate with the same interface as the GPU worker.

It never runs code. ``time`` simulates the issue of a few warps that interleave on one warp
scheduler: each instruction waits for the scoreboards in its wait mask, issues at most one per
cycle, and holds its warp for its stall count; a variable-latency instruction releases its write
scoreboard after the latency of its class. ``check`` is a static pre-screen only (a reorder keeps
the multiset of instructions). Every result says ``backend = "cost-model (CPU estimate, not a
measurement)"``.

The model needs decoded instructions. It is written against the small :class:`Instruction`
protocol (opcode, stall, latency class, scoreboards), so any decoder fits through a ``decode``
callable: the sass engine's, or :func:`decoder_from_control_bits` with an opcode classifier, or
a synthetic one in tests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kbuild.arch import DEFAULT_SM
from kbuild.sass.control import NO_BARRIER
from kbuild.sass.isa import ArchSpec, arch_spec

from .backend import K_SEARCH, MODEL_BACKEND, CheckResult, KernelRef, LoadInfo, TimeResult
from .cubin import control, cubin_digest, text_sections

#: Cycles until a variable-latency result is ready, by latency class: the default architecture's
#: (:data:`kbuild.arch.DEFAULT_SM`'s row; Hopper-ish leads, not measurements).
DEFAULT_LATENCIES: dict[str, int] = dict(arch_spec(DEFAULT_SM).latencies)
#: Cycles until a store or other reader releases its read scoreboard (its sources were read).
READ_RELEASE = 8


@runtime_checkable
class Instruction(Protocol):
    """What the model needs to know about one instruction."""

    @property
    def opcode(self) -> str: ...

    @property
    def stall(self) -> int: ...

    @property
    def latency_class(self) -> str: ...

    @property
    def write_barrier(self) -> int: ...

    @property
    def read_barrier(self) -> int: ...

    @property
    def wait_mask(self) -> int: ...


@dataclass(frozen=True)
class Instr:
    """A plain :class:`Instruction`; scoreboard index 7 means none."""

    opcode: str
    stall: int = 1
    latency_class: str = "fixed"
    write_barrier: int = NO_BARRIER
    read_barrier: int = NO_BARRIER
    wait_mask: int = 0


def estimate_cycles(instrs: Sequence[Instruction], *, warps: int = 4,
                    latencies: Mapping[str, int] = DEFAULT_LATENCIES) -> int:
    """Cycles for ``warps`` warps to run ``instrs`` once each on one scheduler (straight-line model)."""
    n = len(instrs)
    if n == 0:
        return 0
    pc = [0] * warps
    ready = [0] * warps
    boards = [[0] * 6 for _ in range(warps)]
    issue_free = 0
    finish = 0
    last = warps - 1
    while True:
        best, best_t = -1, 0
        for j in range(1, warps + 1):  # round-robin from the warp after the last one issued
            w = (last + j) % warps
            if pc[w] >= n:
                continue
            ins = instrs[pc[w]]
            t = ready[w]
            mask = ins.wait_mask
            b = 0
            while mask:
                if mask & 1:
                    t = max(t, boards[w][b])
                mask >>= 1
                b += 1
            if best < 0 or t < best_t:
                best, best_t = w, t
        if best < 0:
            break
        w = best
        ins = instrs[pc[w]]
        t = max(best_t, issue_free)
        issue_free = t + 1
        ready[w] = t + max(int(ins.stall), 1)
        done = ready[w]
        if 0 <= ins.write_barrier < 6:
            lat = latencies.get(ins.latency_class, latencies.get("global", 500))
            boards[w][ins.write_barrier] = t + max(lat, 1)
            done = max(done, boards[w][ins.write_barrier])
        if 0 <= ins.read_barrier < 6:
            boards[w][ins.read_barrier] = max(boards[w][ins.read_barrier], t + READ_RELEASE)
        finish = max(finish, done)
        pc[w] += 1
        last = w
    return max(finish, max(ready))


Decoder = Callable[[bytes], Sequence[Instruction]]


def decoder_from_control_bits(classify: Callable[[int, bytes], tuple[str, str]]) -> Decoder:
    """A decoder that reads stall and scoreboards from each word's control bits (:mod:`kbuild.sass.control`) and
    asks ``classify(index, word) -> (opcode, latency_class)`` for the rest (e.g. from nvdisasm)."""

    def decode(cubin: bytes) -> list[Instr]:
        out: list[Instr] = []
        for sec in text_sections(cubin):
            for i in range(sec.size // 16):
                word = cubin[sec.offset + 16 * i: sec.offset + 16 * i + 16]
                c = control(word)
                opcode, latency_class = classify(len(out), word)
                out.append(Instr(opcode, c.stall, latency_class, c.wbar, c.rbar, c.wait))
        return out

    return decode


def latency_class(opcode: str, spec: ArchSpec) -> str:
    """The latency class of an opcode in ``spec``'s ISA table (``"LDG.E.128"`` → ``"global"``);
    ``"fixed"`` for ALU work and for opcodes the table does not know."""
    return spec.latency_class(opcode.split(".", 1)[0].lstrip("@!"))


def sass_decoder() -> Decoder:
    """A decoder backed by :mod:`kbuild.sass` (nvdisasm for opcodes, control bits from the words)."""
    from kbuild.sass import disassemble
    from kbuild.sass.elf import Cubin

    def decode(cubin: bytes) -> list[Instr]:
        parsed = Cubin(cubin)
        spec = arch_spec(parsed.sm)
        out: list[Instr] = []
        for kernel in parsed.kernels():
            words = parsed.section_bytes(parsed.text(kernel))
            for i, ins in enumerate(disassemble(parsed, kernel)):
                c = control(words[16 * i:16 * i + 16])
                out.append(Instr(ins.opcode, c.stall, latency_class(ins.opcode, spec), c.wbar, c.rbar, c.wait))
        return out

    return decode


class CostModel:
    """:class:`~kbuild.tune.measure.backend.Backend` from the static issue model (CPU only)."""

    name = MODEL_BACKEND

    def __init__(self, decode: Decoder, *, warps: int = 4, latencies: Mapping[str, int] = DEFAULT_LATENCIES) -> None:
        self.decode = decode
        self.warps = warps
        self.latencies = dict(latencies)
        self._base: Sequence[Instruction] | None = None
        self._base_cycles = 0

    def cycles(self, cubin: bytes) -> int:
        return estimate_cycles(self.decode(cubin), warps=self.warps, latencies=self.latencies)

    def load(self, kernel: KernelRef, baseline: bytes) -> LoadInfo:
        self._base = list(self.decode(baseline))
        self._base_cycles = estimate_cycles(self._base, warps=self.warps, latencies=self.latencies)
        return LoadInfo(backend=self.name, kernel=kernel.spec, arch=0, baseline_digest=cubin_digest(baseline),
                        device="none (CPU estimate)",
                        details={"instructions": len(self._base), "cycles": self._base_cycles, "warps": self.warps})

    def _loaded(self) -> Sequence[Instruction]:
        if self._base is None:
            from kbuild.errors import UsageError

            raise UsageError("nothing loaded: call load(kernel, baseline) first")
        return self._base

    def check(self, candidate: bytes, k: int = K_SEARCH, *, seed: int | None = None) -> CheckResult:
        base = self._loaded()
        try:
            cand = self.decode(candidate)
        except Exception as exc:
            return CheckResult(valid=False, backend=self.name, reason=f"cannot decode: {exc}", executed=False)
        note = {"note": "static pre-screen only; nothing was executed"}
        if len(cand) != len(base):
            return CheckResult(valid=False, backend=self.name, executed=False, details=note,
                               reason=f"instruction count changed ({len(base)} -> {len(cand)})")
        if Counter(i.opcode for i in cand) != Counter(i.opcode for i in base):
            return CheckResult(valid=False, backend=self.name, executed=False, details=note,
                               reason="the multiset of opcodes changed (not a reordering)")
        return CheckResult(valid=True, backend=self.name, executed=False, details=note)

    def time(self, candidate: bytes, *, rounds: int = 8, reps: int = 10) -> TimeResult:
        self._loaded()
        try:
            cand_cycles = self.cycles(candidate)
        except Exception as exc:
            return TimeResult.invalid(self.name, f"cannot decode: {exc}")
        ratio = cand_cycles / self._base_cycles if self._base_cycles else 1.0
        nan = float("nan")
        return TimeResult(backend=self.name, ratio=ratio, ci=(ratio, ratio), aa_ratio=1.0, aa_ci=(1.0, 1.0),
                          baseline_ms=nan, candidate_ms=nan,
                          samples={"baseline_cycles": [[float(self._base_cycles)]],
                                   "candidate_cycles": [[float(cand_cycles)]]})

    def close(self) -> None:
        self._base = None
