"""The recorder's start in a recorded process: called by the ``sitecustomize`` that ``kbuild record`` puts first on
the command's ``PYTHONPATH`` (:mod:`kbuild.record.session`), right after ``triton`` has been imported.

:func:`install` reads the session file the parent wrote (mode, targets, SM count, sample limit, the directory of
the part files, and with ``--capture`` the staging folder of captured tensors), installs the mode (:class:`kbuild.record.gpu.GpuMode` or :class:`kbuild.record.cpu.CpuMode`)
and arranges for the process's recording to be written when it ends: at exit (``atexit``), and, in a child
forked by ``multiprocessing``, by its finaliser (such a child leaves through ``os._exit``); a forked child starts
with an empty recording of its own. A process that ends without either (``os._exit`` called directly, a
``SIGKILL``) loses what it recorded, and the parent says how many processes it heard from.
"""

from __future__ import annotations

import atexit
import json
import os
from typing import Any

from kbuild.record.recorder import Recorder, flush_in_multiprocessing_child

_active: dict[str, Any] = {}


def install(session_file: str) -> Recorder:
    """Start recording this process as the session file says (once per process)."""
    if "recorder" in _active:
        return _active["recorder"]  # type: ignore[no-any-return]
    with open(session_file, encoding="utf-8") as f:
        session = json.load(f)
    capturer = None
    if session.get("capture"):
        from kbuild.record.capture import Capturer

        capturer = Capturer(session["captures"], int(session["capture"]), int(session["capture_mib"]))
    recorder = Recorder(parts_dir=session["parts"], samples=int(session["samples"]), mode=session["mode"],
                        capturer=capturer)
    mode: Any
    if session["mode"] == "cpu":
        from kbuild.record.cpu import CpuMode

        mode = CpuMode(recorder, targets=[int(cc) for cc in session["targets"]], sm_count=int(session["sm_count"]))
    else:
        from kbuild.record.gpu import GpuMode

        mode = GpuMode(recorder)
    mode.install()
    _active.update(recorder=recorder, mode=mode)
    atexit.register(recorder.flush)
    os.register_at_fork(after_in_child=recorder.after_fork_in_child)
    flush_in_multiprocessing_child(recorder)
    return recorder


__all__ = ["install"]
