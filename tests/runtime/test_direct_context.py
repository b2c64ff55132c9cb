"""A cubin is loaded only with a CUDA context current (CPU, stand-ins for libcuda: tests/runtime/runtime_helpers.py).

On the H200 the measurement worker loaded a CUDA C++ kernel's baseline right after ``torch.cuda.init()``, which makes
no context current, and ``cuModuleLoadData`` failed with "invalid device context" (CUDA_ERROR_INVALID_CONTEXT): every
CUDA tuning run failed. :meth:`kbuild.device.cuda.CudaDriver.make_current` retains the device's primary context when
none is current, as Triton's ``load_binary`` does; the shipped-kernel path and the CUDA session both load through it.
The stand-in refuses a load with no current context, as the driver does.
"""

from __future__ import annotations

from types import SimpleNamespace

from runtime_helpers import direct_stand_ins


def test_no_current_context_retains_the_primary_one_before_loading() -> None:
    from kbuild.device import cuda

    with direct_stand_ins() as fake:
        fake.current = 0
        cuda.driver().make_current(0)
        assert fake.contexts == [("retain", 0), ("set", 10)] and fake.current == 10
        cuda.driver().make_current(0)  # one is current now: nothing more
        assert fake.contexts == [("retain", 0), ("set", 10)]


def test_a_current_context_is_left_alone() -> None:
    from kbuild.device import cuda

    with direct_stand_ins() as fake:
        fake.current = 5
        cuda.driver().make_current(0)
        assert fake.contexts == [] and fake.current == 5


def test_the_cuda_session_loads_a_kernel_with_no_context_current() -> None:
    from kbuild.tune.measure.cuda_session import CudaFunction

    spec = SimpleNamespace(shared=0, signature={"x": "*fp32", "n": "i32"})
    with direct_stand_ins() as fake:
        fake.current = 0  # as in a fresh measurement worker: torch has allocated nothing yet
        fn = CudaFunction(b"cubin bytes", "_Z5scalePfi", spec)  # type: ignore[arg-type]
        assert fake.loaded == [b"cubin bytes"] and fake.names == [b"_Z5scalePfi"]
        assert fake.contexts == [("retain", 0), ("set", 10)]
        assert fn.kinds[0] == "ptr"
