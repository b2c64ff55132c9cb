"""kbuild.tile kernels on the GPU (marked ``gpu``; skipped without sm_90): every synthesised variant against
torch, at the small and the full size, on odd row counts (the row mask) and rerun bit-identically; the int4 GEMM
at decode and prefill token counts and a ragged one (Y's rows past M untouched)."""

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


@pytest.mark.parametrize("small", [True, False])
def test_gemm_every_variant_matches_torch_and_ragged_edges_stay_inside(small: bool) -> None:
    import torch

    from kbuild.bench.peers import rel_err
    from kbuild.device import timing

    timing.set_scratch_allocator()  # device-side TMA descriptors
    spec = load_spec("kbuild.tile.kernels:gemm", small=small)
    inputs = spec.make_inputs(1, "cuda")
    assert spec.reference is not None
    want = spec.reference(inputs)["c_ptr"]
    for cfg in spec.configs:
        kernel = compile_spec(spec, cfg, 90)
        inputs["c_ptr"].fill_(float("nan"))
        args = spec.launch_args(inputs, cfg)
        kernel[spec.grid(spec.all_constexprs(cfg))](*args)
        first = inputs["c_ptr"].clone()
        kernel[spec.grid(spec.all_constexprs(cfg))](*args)
        torch.cuda.synchronize()
        assert rel_err(inputs["c_ptr"], want) < 2e-3, cfg.label()
        assert torch.equal(first, inputs["c_ptr"]), cfg.label()
    # a problem no tile divides: TMA zero-fills the K and M edges and clips the stores
    m, n, k = 300, 272, 208
    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn((m, k), generator=g, device="cuda").half()
    b = torch.randn((k, n), generator=g, device="cuda").half()
    c = torch.full((m + 1, n), 7.0, device="cuda", dtype=torch.float16)  # one spare row after C
    cfg = spec.configs[0]
    ragged = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k}
    grid = (-(-m // int(cfg.constexprs["BLOCK_M"])) * -(-n // int(cfg.constexprs["BLOCK_N"])), 1, 1)
    compile_spec(spec, cfg, 90)[grid](*spec.launch_args(ragged, cfg))
    torch.cuda.synchronize()
    assert rel_err(c[:m], a.float() @ b.float()) < 2e-3
    assert bool((c[m:] == 7.0).all())
    # a persistent variant on 2 programs: each walks several tiles, carrying the stage ring's barrier phases
    persistent = [cfg for cfg in spec.configs if cfg.constexprs.get("PERSISTENT")]
    for cfg in persistent:
        c.fill_(7.0)
        compile_spec(spec, cfg, 90)[(2, 1, 1)](*spec.launch_args(ragged, cfg))
        torch.cuda.synchronize()
        assert rel_err(c[:m], a.float() @ b.float()) < 2e-3, cfg.label()
        assert bool((c[m:] == 7.0).all())
    if not small:
        assert persistent  # the 4096^3 autotune list holds persistent variants


@pytest.mark.parametrize("problem", [(16, 128, 256), (16, 4096, 4096), (1, 4096, 14336), (4096, 4096, 4096)])
def test_int4_gemm_every_variant_matches_torch_and_reruns_bit_identically(problem: tuple[int, int, int]) -> None:
    import torch

    from kbuild.bench.peers import rel_err
    from kbuild.device import timing
    from kbuild.tile import kernels

    timing.set_scratch_allocator()  # device-side TMA descriptors
    m, n, k = problem
    spec = kernels.int4_gemm(m=m, n=n, k=k)
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


def test_int4_gemm_ragged_tokens_are_clipped() -> None:
    import torch

    from kbuild.bench.peers import rel_err
    from kbuild.device import timing
    from kbuild.tile import kernels

    timing.set_scratch_allocator()
    m, n, k = 300, 256, 512  # no tokens tile divides 300: TMA zero-fills X's rows and clips Y's
    spec = kernels.int4_gemm(m=m, n=n, k=k)
    inputs = spec.make_inputs(2, "cuda")
    assert spec.reference is not None
    want = spec.reference(inputs)["y_ptr"]
    spare = torch.full((m + 1, n), 7.0, device="cuda", dtype=torch.float16)  # one row after Y
    inputs["y_ptr"] = spare[:m]
    for cfg in spec.configs:
        spare.fill_(7.0)
        compile_spec(spec, cfg, 90)[spec.grid(spec.all_constexprs(cfg))](*spec.launch_args(inputs, cfg))
        torch.cuda.synchronize()
        assert rel_err(spare[:m], want) < 2e-3, cfg.label()
        assert bool((spare[m:] == 7.0).all()), cfg.label()


def test_int4_gemm_split_k_takes_the_remainder_steps() -> None:
    import torch

    from kbuild.bench.peers import rel_err
    from kbuild.device import timing
    from kbuild.tile import kernels

    timing.set_scratch_allocator()
    spec = kernels.int4_gemm(m=1, n=256, k=512)  # 4 K steps: ranked with split-K variants
    split = [cfg for cfg in spec.configs if int(cfg.constexprs["SPLIT_K"]) > 1]
    assert split
    other = kernels.int4_gemm(m=1, n=256, k=640)  # 5 K steps: the last split takes the remainder
    inputs = other.make_inputs(3, "cuda")
    assert other.reference is not None
    want = other.reference(inputs)["y_ptr"]
    inputs["workspace_ptr"] = torch.full((1 << 20,), 1.0, device="cuda")
    inputs["counters_ptr"] = torch.zeros((64,), dtype=torch.int32, device="cuda")
    for cfg in split:
        inputs["y_ptr"].fill_(float("nan"))
        compile_spec(spec, cfg, 90)[spec.grid(spec.all_constexprs(cfg))](*spec.launch_args(inputs, cfg))
        torch.cuda.synchronize()
        assert rel_err(inputs["y_ptr"], want) < 2e-3, cfg.label()
        assert not inputs["counters_ptr"].any(), cfg.label()  # every tile's counter is back to zero
