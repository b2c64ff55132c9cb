"""A pytest plugin for ``adopt_package.py record fla --mode cpu`` only: fla's tests on CPU tensors.

On a machine without a GPU, ``fla.utils`` (0.5.2, ``fla/utils/_device.py``) finds no Triton driver, takes
``device = "cpu"``, then sets it to ``"cuda"`` again for PyTorch >= 2.4 (``if device == 'cpu': device =
'cuda'``), so every test allocates CUDA tensors and fails before it launches anything. This plugin, loaded before
the test files are imported, sets the ``device`` the tests import (and ``device_torch_lib``, which the tests'
conftest synchronises) back to the CPU. fla itself is not changed: its other hardware probes (IS_NVIDIA,
IS_TF32_SUPPORTED, check_shared_mem, get_multiprocessor_count) keep their CPU answers, which is why a CPU
recording of fla is a preview of what its tests launch on a GPU, not the GPU's specialisations.
"""

import fla.utils
import fla.utils._device
import torch

for _module in (fla.utils, fla.utils._device):
    _module.device = "cpu"
    _module.device_torch_lib = torch.cpu
