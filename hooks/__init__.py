"""kbuild.hooks: the build-system adapters over :mod:`kbuild.build`.

* :mod:`.backend` — the PEP 517 backend (``build-backend = "kbuild.hooks.backend"``), which wraps the project's
  real one (scikit-build-core or setuptools) and hands it the plan;
* :mod:`.setuptools_plugin` — the setuptools plugin (entry point ``setuptools.finalize_distribution_options``):
  launchers compiled into a project's extensions, package data into its wheel.

CMake's package (``KBuildConfig.cmake``, found through the ``cmake.prefix`` entry point) lives in
:mod:`kbuild.cmake`. The orchestration itself is :mod:`kbuild.build`; nothing below this package imports it.
"""
