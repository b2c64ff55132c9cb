"""kbx_setup: a setuptools example whose Triton kernel kbuild compiles ahead of time."""
