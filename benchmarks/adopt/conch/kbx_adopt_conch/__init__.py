"""conch-triton-kernels 1.3's kernels as cubins: ``_kbuild/`` (written by the build) holds them; ``import conch`` as
usual, with kbuild.runtime answering its Triton launches."""

try:  # absent in a source checkout, and when kbuild is not installed: Triton compiles as usual
    from . import _kbuild  # noqa: F401  (enables kbuild.runtime for the shipped cubins)
except ImportError:
    pass
