"""kbuild.tile kernels on the GPU (marked ``gpu``; skipped without sm_90): every synthesised variant against
torch, at the small and the full size, on odd row counts (the row mask) and rerun bit-identically."""

from __future__ import annotations

import pytest
from gpu_marks import needs_sm90

from kbuild.bench.spec import compile_spec, load_spec

pytestmark = needs_sm90


@pytest.mark.parametrize("ref", ["kbuild.tile.kernels:softmax", "kbuild.tile.kernels:rmsnorm"])
@pytest.mark.parametrize("small", [True, False])
def test_every_variant_matches_torch(ref: str, small: bool) -> None:
    import torch

    from kbuild.bench.peers import rel_err

    spec = load_spec(ref, small=small)
    inputs = spec.make_inputs(1, "cuda")
    assert spec.reference is not None
    want = spec.reference(inputs)["y_ptr"]
    for cfg in spec.configs:
        kernel = compile_spec(spec, cfg, 90)
        inputs["y_ptr"].fill_(float("nan"))
        args = spec.launch_args(inputs, cfg)
        kernel[spec.grid(spec.all_constexprs(cfg))](*args)
        first = inputs["y_ptr"].clone()
        kernel[spec.grid(spec.all_constexprs(cfg))](*args)
        torch.cuda.synchronize()
        assert rel_err(inputs["y_ptr"], want) < 2e-3, cfg.label()
        assert torch.equal(first, inputs["y_ptr"]), cfg.label()
    # fewer rows than the grid covers: the row mask keeps the last program inside the tensor
    inputs["n_rows"] = inputs["x_ptr"].shape[0] - 3
    inputs["y_ptr"].fill_(7.0)
    cfg = spec.configs[0]
    compile_spec(spec, cfg, 90)[spec.grid(spec.all_constexprs(cfg))](*spec.launch_args(inputs, cfg))
    torch.cuda.synchronize()
    assert bool((inputs["y_ptr"][-3:] == 7.0).all())
