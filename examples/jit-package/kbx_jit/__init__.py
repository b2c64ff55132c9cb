"""kbx_jit: Triton kernels run just in time; kbuild's tuned cubins replace Triton's at load when shipped.

``kbx_jit/_kbuild/`` is written by the build (``ship = "package-data"``); in a source checkout it
does not exist and Triton's own cubins run.
"""

try:
    from . import _kbuild  # noqa: F401  (enables kbuild.runtime for this package)
except ImportError:
    pass

from .ops import matmul_leaky_relu, softmax

__all__ = ["matmul_leaky_relu", "softmax"]
