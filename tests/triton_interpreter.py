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


def scalars_as_fp32() -> None:
    """Pass float scalar arguments to an interpreted kernel as fp32 tensors, as the compiled path does: Triton
    3.6's interpreter leaves them Python floats (``_implicit_cvt`` converts ints and pointers only), on which
    ``eps.to(X_row_dtype)`` in Liger-Kernel's RMSNorm fails. Opt-in: other interpreted tests keep floats."""
    import triton.language as tl

    original = interpreter._implicit_cvt  # type: ignore[attr-defined]

    def convert(arg: object) -> object:
        if type(arg) is float:
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)

    interpreter._implicit_cvt = convert  # type: ignore[attr-defined]


def libdevice_as_tl_math(module: object) -> None:
    """Rebind ``module``'s names that are libdevice functions (``rsqrt``, ``tanh`` imported from
    ``triton.language.extra.libdevice``) to the ``tl.math`` function of the same name, looked up when called: the
    interpreter patches ``tl.math`` but not libdevice, whose functions then return None."""
    import triton.language as tl

    for name, value in list(vars(module).items()):
        if str(getattr(value, "__module__", "")).startswith("triton.language.extra") and hasattr(tl.math, name):
            setattr(module, name, (lambda n: lambda *a, **k: getattr(tl.math, n)(*a, **k))(name))
