"""kbuild.declarations: the grammar of a kernel declaration, what a project writes under ``[[tool.kbuild.kernels]]``.

Module by module:

* :mod:`.kernel` — :class:`~.kernel.KernelSettings`, one declaration, and its checks (:func:`~.kernel.expand_entries`);
* :mod:`.signature` — Triton's AOT type of one runtime parameter, and a constexpr's value (the bench specs of
  :mod:`kbuild.bench.spec` use the same grammar);
* :mod:`.variants` — one declaration expanded over a matrix of values into several entries;
* :mod:`.space` — the configurations a kernel is tuned over (``space``, ``configs``, ``@triton.autotune``);
* :mod:`.grid` — the launch grid's expressions, checked, evaluated and written as C.

The settings model (:mod:`kbuild.settings`) reads the table and hands each entry here; the build
(:mod:`kbuild.build.resolve`), the compile path, the key and the emitted launchers read the checked declarations.
Nothing here reads a file, the environment or Triton: the errors name the key below the kernel's table, and the
settings model adds the file.
"""
