"""Switch Triton 3.6 to its CPU interpreter in a test subprocess, with the one fix it needs on numpy 2.

Import this module first in a script that runs kernels in the interpreter: it sets
``TRITON_INTERPRET=1`` before Triton is imported and patches the interpreter's ``int``, because
numpy 2 refuses ``int()`` of a one-element 1-d array, which Triton 3.6's interpreter relies on.
"""

from __future__ import annotations

import builtins
import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np
import triton.runtime.interpreter as interpreter


class _IntMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, builtins.int)


class _Int(metaclass=_IntMeta):
    def __new__(cls, x: object = 0, *args: object) -> int:  # type: ignore[misc]
        if isinstance(x, np.ndarray) and x.size == 1:
            x = x.reshape(())
        return builtins.int(x, *args)  # type: ignore[call-overload,no-any-return]


interpreter.int = _Int  # type: ignore[attr-defined]
