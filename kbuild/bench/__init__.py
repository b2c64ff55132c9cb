"""kbuild.bench: the kernel benchmark suite (``kbuild bench``) and the bench spec interface.

:mod:`kbuild.bench.spec` defines :class:`~kbuild.bench.spec.BenchSpec`, the interface that
``[tool.kbuild.kernels].bench`` points to; :mod:`kbuild.bench.kernels` holds the suite.
Nothing here imports torch or touches a GPU at import time.
"""
