"""A package that decides at import what its kernel compiles to (tests of kbuild's recordings, issue 34).

Like a real package that probes the hardware when it is imported, :mod:`kbx_probe.kernels` folds a precision
into its kernel (``"tf32"`` where ``torch.cuda.is_available()``, ``"ieee"`` elsewhere) and picks its softplus by
the same probe, so the kernel's source hash on a GPU machine is not the one a CPU build machine sees.
"""

from .ops import dense_softplus

__all__ = ["dense_softplus"]
