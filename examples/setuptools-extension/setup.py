"""A plain setuptools extension; kbuild's plugin adds kbuild_kernels.c to it at build time."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kbx_setup._kbx", ["src/_kbx.c"])])
