"""Run ptxas with a wall-clock bound: ``python -I -S ptxas_guard.py REAL SECONDS MARKER PARENT_PID ARGS...``.

Triton runs ptxas itself (``subprocess.run`` in ``triton/backends/nvidia/compiler.py``, with no
timeout). :func:`kbuild.compile.triton_aot.hermetic_compile` points Triton's ptxas knob at a
two-line shell script that execs this file, which runs the real ptxas and stops it after
``SECONDS``: it then writes ``MARKER`` (how kbuild tells a timeout from a ptxas error), says so
on stderr (Triton puts ptxas's stderr into its error) and exits 124, as ``timeout(1)`` does.

No process outlives kbuild: this guard asks the kernel to kill it when its parent (kbuild) dies,
and ptxas to be killed when the guard dies (Linux ``PR_SET_PDEATHSIG``), so a SIGKILL of kbuild
or of the guard leaves no ptxas behind. Standard library only: it runs with ``-I -S``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Be killed when ``parent`` exits; exit now if it already has (best effort off Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the timeout still holds
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(128 + signal.SIGKILL)


def main(argv: list[str]) -> int:
    real, seconds, marker, parent = argv[1], float(argv[2]), argv[3], int(argv[4])
    _die_with_parent(parent)
    me = os.getpid()
    proc = subprocess.Popen([real, *argv[5:]], preexec_fn=lambda: _die_with_parent(me))
    try:
        status = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        with open(marker, "w") as f:
            f.write(f"{seconds:g}\n")
        print(f"kbuild: ptxas stopped after {seconds:g} s (compile_timeout)", file=sys.stderr)
        return 124
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
