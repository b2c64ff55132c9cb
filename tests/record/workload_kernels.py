"""A workload for ``kbuild record`` in the tests: the kernels of ``record_kernels`` on CPU tensors, two shapes each.

``python workload_kernels.py [--fake-gpu | --cuda] [--hard-exit]``: with ``--cuda`` the tensors are on the GPU and the
persistent kernel is sized by its SM count (a GPU machine); with ``--fake-gpu`` Triton's driver is replaced first by
:class:`FakeGpu`, a CPU stand-in for tests only (it compiles for real, for sm_90, and launches nothing: the
launcher calls Triton's launch hooks as the real one does), and the persistent kernel is sized by its SM count
(132), as a package sizes it by the GPU's; on a CPU it is sized by one SM, as Liger-Kernel does for CPU tensors.
"""

import os
import sys

import record_kernels as k
import torch


class FakeGpu:
    """Stand-in for Triton's CUDA driver (tests only): an sm_90 device with 132 SMs. Compiles for real (ptxas);
    a launch runs the launch hooks as Triton's C launcher does and nothing else; the benchmarker times each
    candidate as faster than the one before, so an autotuner chooses its last config."""

    def __init__(self, cc=90, sms=132):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", cc, 32)
        self.utils = _Utils(sms)
        self.benchmarked = 0

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    @property
    def launcher_cls(self):
        return _Launcher

    def get_benchmarker(self):
        def bench(kernel_call, quantiles=None):
            kernel_call()
            self.benchmarked += 1
            t = 100.0 - self.benchmarked
            return [t, t, t]
        return bench


class _Utils:
    def __init__(self, sms):
        self.sms = sms

    def get_device_properties(self, device):
        return {"max_shared_mem": 232448, "multiprocessor_count": self.sms, "max_num_regs": 65536, "warpSize": 32}

    def load_binary(self, name, kernel, shared, device):
        return (1, 2, 32, 0, 1024)


class _Launcher:
    def __init__(self, src, metadata):
        pass

    def __call__(self, gx, gy, gz, stream, function, packed, launch_metadata, enter_hook, exit_hook, *args):
        if enter_hook is not None:
            enter_hook(launch_metadata)
        if exit_hook is not None:
            exit_hook(launch_metadata)


def main(fake_gpu, cuda=False, hard_exit=False):
    sms, device = 1, "cpu"
    if fake_gpu:
        from triton.runtime.driver import driver

        driver.set_active(FakeGpu())
        sms = driver.active.utils.get_device_properties(0)["multiprocessor_count"]
    elif cuda:
        sms, device = torch.cuda.get_device_properties(0).multi_processor_count, "cuda"
    for n in (1024, 4096):
        x = torch.randn(n, device=device)
        k.scale_op(x)
        k.scale_op(x, 0.5)
        k.shift_op(x)
    if hard_exit:  # a process killed right after an autotuned call (an xdist worker cut by a timeout): no atexit
        os._exit(0)
    for n_rows in (2048, 4096):
        k.rows_op(torch.randn(n_rows, 96, device=device), sms)
    print("workload done")


if __name__ == "__main__":
    main("--fake-gpu" in sys.argv[1:], "--cuda" in sys.argv[1:], "--hard-exit" in sys.argv[1:])
