"""conch-triton-kernels 1.3's kernels as cubins: ``_kbuild/`` (written by the build) holds them; ``import conch`` as
usual, with kbuild.runtime answering its Triton launches."""
