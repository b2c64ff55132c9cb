"""nvcc's module id made reproducible: the process id ``cudafe++`` puts in it replaced by a value of the unit.

``cudafe++ --gen_module_id_file`` writes the unit's module id, which names the unit's internal-linkage device
symbols and its registration code in the PTX, the cubins and the object (``_ZN..._INTERNAL_<id>...``). It is
``_<hash>_<length>_<file name>_cu_`` followed by the first external function or variable it finds in the unit
(``_Z1kPi``) or by a hash; for a unit with no external function or variable the hash is followed by
``_<pid>``, the process id of that ``cudafe++`` (the binary's own debug text reads ``make_module_id: str1 = %s,
str2 = %s, pid = %ld``). Two compiles of such a unit differ wherever the id appears (issue 32 saw the symbol suffix
``_762612`` against ``_765112`` and 2.69 MB of differing ``.nv_fatbin`` in a real extension), so a build from an
empty store was not reproducible, even by plain nvcc.

nvcc has no option to set the id, but ``cudafe++`` reads it from ``--module_id_file_name`` when it is not asked to
generate it (nvcc's later steps, ``cicc``, read it that way too). The launcher therefore runs ``cudafe++`` as
planned; when the id it wrote ends in ``_<that process's id>``, it writes the id with the pid replaced by
:func:`unit_suffix` (eight decimal digits of the sha256 of the preprocessed unit and the step's arguments, with
kbuild's temporary directory written as a placeholder) and runs ``cudafe++`` again in read mode
(:func:`read_mode`), whose outputs are byte for byte those of a run that had generated that id (checked with
nvcc 13.5 and 13.0.88, torch 2.11's). Everything else nvcc writes (the hashes, the file name) stays as nvcc made
it. Uniqueness: the pid kept two compiles of one file apart within a machine at one time; the suffix keeps apart
any two compiles whose preprocessed unit or ``cudafe++`` arguments differ, which covers one file compiled twice
with different macros.
The same file compiled twice with the same flags into two objects of one ``-rdc`` link would get the same id (so
would its external symbols, were it to have any).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

#: The digits of :func:`unit_suffix`.
SUFFIX_DIGITS = 8


def pid_suffix(module_id: str, pid: int) -> bool:
    """Whether ``module_id`` ends in the process id ``pid`` of the ``cudafe++`` that generated it."""
    return module_id.endswith(f"_{pid}") and "_cu_" in module_id


def unit_suffix(preprocessed: Path, argv: Sequence[str], tmp: str) -> str:
    """The stand-in for the pid: decimal digits of the sha256 of the preprocessed unit ``cudafe++`` reads and its
    arguments, with the temporary directory ``tmp`` written as a placeholder (the same in every build)."""
    h = hashlib.sha256()
    h.update(preprocessed.read_bytes().replace(tmp.encode(), b"@TMP@"))
    for a in argv[1:]:
        h.update(b"\0" + a.replace(tmp, "@TMP@").encode())
    return str(int(h.hexdigest(), 16) % 10 ** SUFFIX_DIGITS).zfill(SUFFIX_DIGITS)


def pinned(module_id: str, pid: int, suffix: str) -> str:
    """``module_id`` with its trailing ``_<pid>`` replaced by ``_<suffix>``."""
    assert pid_suffix(module_id, pid)
    return module_id[: -len(str(pid))] + suffix


def read_mode(argv: Sequence[str]) -> list[str]:
    """The ``cudafe++`` command that reads the module id from ``--module_id_file_name`` instead of generating it."""
    return [a for a in argv if a != "--gen_module_id_file"]


def module_id_file(argv: Sequence[str], cwd: Path) -> Path | None:
    """The file ``--module_id_file_name`` names in a command, or None."""
    for i, a in enumerate(argv[:-1]):
        if a == "--module_id_file_name":
            return cwd / argv[i + 1]
    return None


__all__ = ["SUFFIX_DIGITS", "module_id_file", "pid_suffix", "pinned", "read_mode", "unit_suffix"]
