"""kbuild: ahead-of-time compiled, SASS-tuned GPU kernels for Python packages.

The import package owns the library (the settings model ``kbuild.settings``, the declaration grammar
``kbuild.declarations``, the table of GPU architectures, the build core ``kbuild.build``, compile, key, sass, tune,
bench, runtime, prewarm, CLI); ``tests/test_import_graph.py`` states its layers, from the ground up. The folders ``hooks/``, ``cache/`` and ``templates/`` of
the source tree are installed as the subpackages ``kbuild.hooks``, ``kbuild.cache`` and ``kbuild.templates``.

Nothing here imports Triton, torch or a GPU driver at import time.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
