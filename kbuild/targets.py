"""GPU targets: parse ``sm_XY`` strings into the exact architecture the compiler builds for.

The exact target matters for the key: Triton 3.6 builds compute capability 9.0 for ``sm_90a``
(the arch-specific variant with wgmma/TMA), and ``sm_90`` and ``sm_90a`` cubins differ. The
user writes ``sm_90`` (or ``sm_90a``); :attr:`Target.arch` is what ptxas received.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kbuild.arch import Architecture, architecture, find, names, rows


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
    def architecture(self) -> Architecture:
        """This target's row of the architecture table (:mod:`kbuild.arch`)."""
        return architecture(self.cc)

    @property
    def arch(self) -> str:
        """What ptxas compiles for: Triton uses the arch-specific variant where there is one (``sm_90a``)."""
        return self.architecture.ptxas_name

    @property
    def family(self) -> str:
        """ISA family whose SASS table applies (``sm_80`` covers sm_80/86/87; see :mod:`kbuild.sass.isa`)."""
        return self.architecture.family

    def type_problem(self, triton_type: str) -> str | None:
        """Why a kernel parameter of ``triton_type`` (``"*fp8e4nv"``) cannot be compiled for this target, or None.

        Triton 3.6's NVIDIA backend (``CUDAOptions.supported_fp8_dtypes``) has fp8e4nv from compute
        capability 8.9 on; fp8e5 and fp8e4b15 everywhere.
        """
        if "fp8e4nv" in triton_type and not self.architecture.fp8e4nv:
            return f"{triton_type!r} is not supported on {self.name}: Triton has fp8e4nv from {_first('fp8e4nv')} on"
        return None

    def __str__(self) -> str:
        return self.name


def _first(fact: str) -> str:
    """The first architecture whose row has ``fact`` (the later ones have it too), for messages."""
    return next(r.name for r in rows() if getattr(r, fact))


def parse_target(text: str) -> Target:
    """``"sm_90"`` or ``"sm_90a"`` → :class:`Target`; ValueError naming the supported ones otherwise.

    One spelling, the one ptxas and :attr:`Target.name` use, everywhere a target is read (``targets``,
    ``KBUILD_TARGETS``, ``--targets``, ``--target``): ``"sm90"``, ``"90"``, ``"SM_90"``, ``" sm_90"`` and
    ``"sm_090"`` are refused with the spelling they look like (``did you mean 'sm_90'?``), as the settings
    model refuses ``tune = "Auto"``, rather than read as sm_90 behind the user's back. Only ASCII is a
    target: Python's ``int()`` and ``\\d`` also read ``"９０"`` or ``"٩٠"`` as 90, and a look-alike string must
    not pass for the one ptxas receives.
    """
    supported = ", ".join(names())
    if not isinstance(text, str):
        raise ValueError(f"expected a target string such as 'sm_90', got {type(text).__name__} {text!r}")
    if not text.isascii():
        odd = next(c for c in text if not c.isascii())
        raise ValueError(f"{text!r} is not a GPU target: it contains the non-ASCII character {odd!r} "
                         f"(U+{ord(odd):04X}); expected one of {supported}")
    m = re.fullmatch(r"sm_([1-9][0-9]{1,2})(a?)", text)
    if not m:
        loose = re.fullmatch(r"(?:sm_?)?0*([1-9][0-9]{1,2})(a?)", text.strip().lower())
        if loose and find(int(loose.group(1))) is not None:
            raise ValueError(f"{text!r} is not a GPU target; did you mean 'sm_{loose.group(1)}{loose.group(2)}'? "
                             "(targets are written sm_XY, as ptxas takes them)")
        raise ValueError(f"{text!r} is not a GPU target; expected one of {supported}")
    cc = int(m.group(1))
    row = find(cc)
    if row is None:
        raise ValueError(f"unsupported target {text!r}; Triton 3.6 targets here: {supported}")
    if m.group(2) and not row.specific:
        raise ValueError(f"{text!r}: arch-specific 'a' targets exist only from {_first('specific')} on")
    return Target(cc)
