"""kbx_demo: an example package whose Triton kernels kbuild compiles ahead of time."""
