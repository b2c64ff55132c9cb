"""GPU targets: parse ``sm_XY`` strings into the exact architecture the compiler builds for.

The exact target matters for the key: Triton 3.6 builds compute capability 9.0 for ``sm_90a``
(the arch-specific variant with wgmma/TMA), and ``sm_90`` and ``sm_90a`` cubins differ. The
user writes ``sm_90`` (or ``sm_90a``); :attr:`Target.arch` is what ptxas received.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Compute capabilities Triton 3.6's NVIDIA backend compiles for, and the ISA family used by kbuild.sass.
SUPPORTED: dict[int, str] = {
    75: "sm_75",
    80: "sm_80",
    86: "sm_80",
    87: "sm_80",
    89: "sm_89",
    90: "sm_90",
    100: "sm_100",
    103: "sm_100",
    120: "sm_120",
}


@dataclass(frozen=True, order=True)
class Target:
    """One compilation target."""

    cc: int
    """Compute capability as an integer (90 for sm_90)."""

    @property
    def name(self) -> str:
        """Canonical user-facing name, ``sm_90``."""
        return f"sm_{self.cc}"

    @property
    def arch(self) -> str:
        """What ptxas compiles for: Triton uses the ``a`` variant from sm_90 on."""
        return f"sm_{self.cc}a" if self.cc >= 90 else f"sm_{self.cc}"

    @property
    def family(self) -> str:
        """ISA family whose SASS table applies (``sm_80`` covers sm_80/86/87; see :mod:`kbuild.sass.isa`)."""
        return SUPPORTED[self.cc]

    def type_problem(self, triton_type: str) -> str | None:
        """Why a kernel parameter of ``triton_type`` (``"*fp8e4nv"``) cannot be compiled for this target, or None.

        Triton 3.6's NVIDIA backend (``CUDAOptions.supported_fp8_dtypes``) has fp8e4nv from compute
        capability 8.9 on; fp8e5 and fp8e4b15 everywhere.
        """
        if "fp8e4nv" in triton_type and self.cc < 89:
            return f"{triton_type!r} is not supported on {self.name}: Triton has fp8e4nv from sm_89 on"
        return None

    def __str__(self) -> str:
        return self.name


def parse_target(text: str) -> Target:
    """``"sm_90"`` or ``"sm_90a"`` → :class:`Target`; ValueError naming the supported ones otherwise.

    One spelling, the one ptxas and :attr:`Target.name` use, everywhere a target is read (``targets``,
    ``KBUILD_TARGETS``, ``--targets``, ``--target``): ``"sm90"``, ``"90"``, ``"SM_90"``, ``" sm_90"`` and
    ``"sm_090"`` are refused with the spelling they look like (``did you mean 'sm_90'?``), as the settings
    model refuses ``tune = "Auto"``, rather than read as sm_90 behind the user's back. Only ASCII is a
    target: Python's ``int()`` and ``\\d`` also read ``"９０"`` or ``"٩٠"`` as 90, and a look-alike string must
    not pass for the one ptxas receives.
    """
    supported = ", ".join(f"sm_{cc}" for cc in SUPPORTED)
    if not isinstance(text, str):
        raise ValueError(f"expected a target string such as 'sm_90', got {type(text).__name__} {text!r}")
    if not text.isascii():
        odd = next(c for c in text if not c.isascii())
        raise ValueError(f"{text!r} is not a GPU target: it contains the non-ASCII character {odd!r} "
                         f"(U+{ord(odd):04X}); expected one of {supported}")
    m = re.fullmatch(r"sm_([1-9][0-9]{1,2})(a?)", text)
    if not m:
        loose = re.fullmatch(r"(?:sm_?)?0*([1-9][0-9]{1,2})(a?)", text.strip().lower())
        if loose and int(loose.group(1)) in SUPPORTED:
            raise ValueError(f"{text!r} is not a GPU target; did you mean 'sm_{loose.group(1)}{loose.group(2)}'? "
                             "(targets are written sm_XY, as ptxas takes them)")
        raise ValueError(f"{text!r} is not a GPU target; expected one of {supported}")
    cc = int(m.group(1))
    if cc not in SUPPORTED:
        raise ValueError(f"unsupported target {text!r}; Triton 3.6 targets here: {supported}")
    if m.group(2) and cc < 90:
        raise ValueError(f"{text!r}: arch-specific 'a' targets exist only from sm_90 on")
    return Target(cc)
