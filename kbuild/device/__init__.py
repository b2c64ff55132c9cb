"""kbuild.device: the GPU this process runs on, the floor that ``bench``, ``tune`` and the run time stand on.

* :mod:`.cuda`: the CUDA driver API through ctypes, kbuild's one binding of ``libcuda.so.1``: devices, the
  current context, modules loaded from bytes, launches (the run time's direct launcher, the measurement
  worker's CUDA C++ kernels and the probe use it);
* :mod:`.probe`: which NVIDIA GPUs this machine has, asked of the CUDA driver (no torch; cheap
  enough for every build on a CPU-only machine);
* :mod:`.timing`: running kernels through torch: the device check, launching other machine code
  through a Triton kernel, the L2 flush, interleaved CUDA-event timing, the device report;
* :mod:`.stats`: medians, ratio of medians and bootstrap intervals over timed rounds.

``kbuild bench`` (:mod:`kbuild.bench.runner`) and the tuner's measurement worker
(:mod:`kbuild.tune.measure.session`) time kernels with the same code. This package imports
nothing from kbuild but :mod:`kbuild.errors`, and nothing here imports torch at import time.
"""
