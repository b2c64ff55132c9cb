"""fla-core 0.5.2's kernels as cubins: ``_kbuild/`` (written by the build) holds them; ``import fla`` as usual, with
kbuild.runtime answering its Triton launches."""
