"""Peers: the torch implementations a user would pick instead of each suite kernel (and of the package kernels
in :data:`FUNCTION_PEERS`, by function), for ``kbuild bench``.

Design (the smallest that works): peers are keyed by the suite kernel's spec name in :data:`PEERS` (the
names of :data:`kbuild.bench.kernels.SUITE`), so the bench spec interface stays as it is; a project's own
spec has no peers unless its name is added here. A :class:`Peer` builds, from the spec and the very inputs
the kernel gets (``spec.make_inputs``), a thunk that runs the peer and returns ``{output: tensor}``:

* matmuls: cuBLAS through ``torch.matmul``/``torch.bmm``; for the fused matmul + LeakyReLU also the composite
  (GEMM, then ``leaky_relu``). The bare GEMM skips the epilogue, so it is checked against ``A @ B``, not the
  spec's reference, and says so in its note;
* attention: ``scaled_dot_product_attention`` under ``sdpa_kernel`` with one backend each (flash, cuDNN,
  memory-efficient). A backend that refuses the shape, dtype or GPU is *unavailable*, with torch's reason;
* softmax, LayerNorm, RMSNorm, RMSNorm+SwiGLU: the torch functions or composite a model would call.

:func:`prepare` runs a peer once, checks its outputs against the reference (relative error; a peer that
disagrees is kept and flagged, not hidden), and :func:`summarize` turns interleaved samples of kernel and
peer into ``peer_ms / kernel_ms`` (> 1: the kernel is faster) with a bootstrap interval over rounds.

Importing this module imports neither torch nor triton (torch is imported where a peer runs).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbuild.bench.spec import BenchSpec
from kbuild.device import stats

Outputs = dict[str, Any]
Thunk = Callable[[], Outputs]


@dataclass(frozen=True)
class Peer:
    """One alternative implementation of a suite kernel."""

    label: str
    """Stable id in the JSON record and the table (``cublas``, ``sdpa_cudnn``, ``torch_composite``, ...)."""
    name: str
    """What it is, for people: the library and the call."""
    build: Callable[[BenchSpec, Mapping[str, Any]], Thunk]
    """``(spec, inputs) -> thunk``; the thunk runs the peer once and returns ``{output param: tensor}`` for the
    outputs it computes (a subset of ``spec.outputs``)."""
    note: str = ""
    reference: Callable[[BenchSpec, Mapping[str, Any]], Outputs] | None = None
    """What the peer's output is checked against when it computes something else than the spec's reference
    (the bare GEMM of a fused matmul); ``None``: the spec's reference."""


# -- builders ------------------------------------------------------------------------------------------


def _matmul(epilogue: bool) -> Callable[[BenchSpec, Mapping[str, Any]], Thunk]:
    def build(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
        import torch

        a, b = x["a_ptr"], x["b_ptr"]
        alpha = float(spec.constexprs.get("ALPHA", 0.0))
        if epilogue:
            return lambda: {"c_ptr": torch.nn.functional.leaky_relu(torch.matmul(a, b), alpha)}
        return lambda: {"c_ptr": torch.matmul(a, b)}

    return build


def _bmm(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    a, b = x["a_ptr"], x["b_ptr"]
    return lambda: {"c_ptr": torch.bmm(a, b)}


def _gemm_reference(spec: BenchSpec, x: Mapping[str, Any]) -> Outputs:
    return {"c_ptr": x["a_ptr"].float() @ x["b_ptr"].float()}


def _sdpa(backend: str) -> Callable[[BenchSpec, Mapping[str, Any]], Thunk]:
    def build(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        chosen = getattr(SDPBackend, backend)
        q, k, v = (x[n].unsqueeze(0) for n in ("q_ptr", "k_ptr", "v_ptr"))  # (1, batch·heads, seq, d)
        causal, scale = bool(spec.constexprs["CAUSAL"]), float(x["sm_scale"])

        def run() -> Outputs:
            with sdpa_kernel(chosen):
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            return {"o_ptr": o.squeeze(0)}

        return run

    return build


def _softmax(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    inp = x["x_ptr"]
    return lambda: {"y_ptr": torch.softmax(inp, dim=-1)}


def _layer_norm(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    inp, w, b, eps = x["x_ptr"], x["w_ptr"], x["b_ptr"], float(spec.constexprs["EPS"])

    def run() -> Outputs:
        y, mean, rstd = torch.native_layer_norm(inp, [inp.shape[-1]], w, b, eps)
        return {"y_ptr": y, "mean_ptr": mean.view(-1), "rstd_ptr": rstd.view(-1)}

    return run


def _rms_norm(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    inp, w, eps = x["x_ptr"], x["w_ptr"], float(spec.constexprs["EPS"])
    return lambda: {"y_ptr": torch.nn.functional.rms_norm(inp, [inp.shape[-1]], w, eps)}


def _rms_norm_composite(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    inp, w, eps = x["x_ptr"], x["w_ptr"], float(spec.constexprs["EPS"])

    def run() -> Outputs:  # as Hugging Face's LlamaRMSNorm writes it
        xf = inp.float()
        return {"y_ptr": (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(inp.dtype) * w}

    return run


def _rmsnorm_swiglu(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    F = torch.nn.functional
    inp, nw, wg, wu, eps = x["x_ptr"], x["nw_ptr"], x["wg_ptr"], x["wu_ptr"], float(spec.constexprs["EPS"])

    def run() -> Outputs:
        xn = F.rms_norm(inp, [inp.shape[-1]], nw, eps)
        return {"h_ptr": F.silu(xn @ wg) * (xn @ wu)}

    return run


CUBLAS = Peer("cublas", "cuBLAS (torch.matmul)", _matmul(False))
_SDPA = [Peer("sdpa_flash", "torch SDPA, FLASH_ATTENTION backend", _sdpa("FLASH_ATTENTION")),
         Peer("sdpa_cudnn", "torch SDPA, CUDNN_ATTENTION backend", _sdpa("CUDNN_ATTENTION")),
         Peer("sdpa_efficient", "torch SDPA, EFFICIENT_ATTENTION backend", _sdpa("EFFICIENT_ATTENTION"))]
_FUSED_MATMUL = [
    Peer("cublas", "cuBLAS (torch.matmul), no epilogue", _matmul(False),
         note="GEMM only, without the LeakyReLU: a lower bound for cuBLAS; checked against A @ B",
         reference=_gemm_reference),
    Peer("cublas_leaky_relu", "torch composite: torch.matmul then F.leaky_relu", _matmul(True)),
]

#: Suite kernel (spec name) → its peers.
PEERS: dict[str, list[Peer]] = {
    "matmul_leakyrelu_4096": _FUSED_MATMUL,
    "matmul_leakyrelu_512x512x2048": _FUSED_MATMUL,
    "bmm_64x1024": [Peer("cublas", "cuBLAS (torch.bmm)", _bmm)],
    "softmax": [Peer("torch_softmax", "torch.softmax", _softmax)],
    "layernorm": [Peer("torch_layer_norm", "torch.native_layer_norm (what F.layer_norm runs)", _layer_norm)],
    "rmsnorm": [Peer("torch_rms_norm", "F.rms_norm", _rms_norm),
                Peer("torch_composite", "torch composite (fp32 rsqrt(mean(x²)), as LlamaRMSNorm)",
                     _rms_norm_composite)],
    "rmsnorm_swiglu": [Peer("torch_composite", "torch composite: F.rms_norm, two cuBLAS GEMMs, F.silu · up",
                            _rmsnorm_swiglu)],
    "flash_attn_d64": _SDPA,
    "flash_attn_d64_causal": _SDPA,
    "flash_attn_d128": _SDPA,
    "flash_attn_d128_causal": _SDPA,
    "tma_matmul_4096": [CUBLAS],
}


# -- peers of kernels a package runs (a spec made from a recording: its inputs are the kernel's own parameters) ---


def _arg(spec: BenchSpec, x: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A scalar the kernel takes as an argument or a constexpr."""
    return x[name] if name in x else spec.constexprs.get(name, default)


def _liger_rms_norm(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    inp, w = x["X_ptr"], x["W_ptr"]
    eps, offset = float(_arg(spec, x, "eps")), float(_arg(spec, x, "offset", 0.0))
    # Liger scales by (offset + W) (Gemma's offset 1); without a weight (elementwise_affine off), not at all
    weight = None if w is None else (w + offset if offset else w)
    return lambda: {"Y_ptr": torch.nn.functional.rms_norm(inp, [inp.shape[-1]], weight, eps)}


def _liger_layer_norm(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    inp, w, b, eps = x["X_ptr"], x["W_ptr"], x["B_ptr"], float(_arg(spec, x, "eps"))

    def run() -> Outputs:
        y, mean, rstd = torch.native_layer_norm(inp, [inp.shape[-1]], w, b, eps)
        return {"Y_ptr": y, "Mean_ptr": mean.view(-1), "RSTD_ptr": rstd.view(-1)}

    return run


def _liger_swiglu(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    a, b, gate = x["a_ptr"], x["b_ptr"], float(_arg(spec, x, "gate_multiplier", 1.0))
    gated = a * gate if gate != 1.0 else a
    return lambda: {"c_ptr": torch.nn.functional.silu(gated) * b}


def _liger_geglu(spec: BenchSpec, x: Mapping[str, Any]) -> Thunk:
    import torch

    a, b = x["a"], x["b"]
    return lambda: {"c": torch.nn.functional.gelu(a, approximate="tanh") * b}


#: A package's kernel (``module:qualname``, as a recording names it) → the torch calls a model would make instead.
#: The peers of Liger-Kernel 0.8.5's forward kernels, mapped onto each kernel's own parameter names.
FUNCTION_PEERS: dict[str, list[Peer]] = {
    "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel": [
        Peer("torch_rms_norm", "F.rms_norm (weight + Liger's offset)", _liger_rms_norm)],
    "liger_kernel.ops.layer_norm:_layer_norm_forward_kernel": [
        Peer("torch_layer_norm", "torch.native_layer_norm (what F.layer_norm runs)", _liger_layer_norm)],
    "liger_kernel.ops.swiglu:_swiglu_forward_kernel": [
        Peer("torch_composite", "torch composite: F.silu(a) · b (LlamaMLP's)", _liger_swiglu)],
    "liger_kernel.ops.geglu:_geglu_tanh_forward_kernel": [
        Peer("torch_composite", "torch composite: F.gelu(a, approximate='tanh') · b", _liger_geglu)],
}


def function_of(spec: BenchSpec) -> str | None:
    """``module:qualname`` of the spec's ``@triton.jit`` function (None when it has none)."""
    fn = getattr(getattr(spec, "fn", None), "fn", None)
    if fn is None:
        return None
    return f"{fn.__module__}:{fn.__qualname__}"


def peers_for(spec: BenchSpec) -> list[Peer]:
    """The peers of ``spec``: by its name for a suite kernel (:data:`PEERS`), else by its function for a package's
    kernel (:data:`FUNCTION_PEERS`, a spec made from a recording); none for any other."""
    if spec.name in PEERS:
        return list(PEERS[spec.name])
    return list(FUNCTION_PEERS.get(function_of(spec) or "", ()))


# -- running and judging -------------------------------------------------------------------------------


def time_beside_peers(spec: Any, backend: Any, ref: Any, baseline: Callable[[], bytes], shipped: bytes
                      ) -> dict[str, Any] | None:
    """The peers of ``spec`` (:func:`kbuild.bench.peers.peers_for`: the torch calls a user would make instead)
    beside what ships: ``shipped`` (the chosen configuration's schedule, ``baseline()`` its untouched compile) timed
    interleaved with each peer on this machine's GPU (``backend``, the tuner's worker). None when the spec has no
    peer; without a GPU (the cost model), the peers named and not timed."""
    from kbuild.errors import KBuildError

    found = peers_for(spec)
    if not found:
        return None
    if backend is None:
        return {"not_timed": "the CPU cost model times kbuild's kernels only; a GPU build times the peers",
                "peers": [{"label": p.label, "name": p.name} for p in found]}
    try:
        backend.load(ref, baseline())
    except KBuildError as exc:
        return {"error": f"the chosen configuration could not be loaded to time its peers: {exc}"}
    result: dict[str, Any] = backend.peers(shipped)
    return result


def rel_err(out: Any, ref: Any) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (NaN in ``out`` gives NaN)."""
    return float((out.double() - ref.double()).norm() / max(float(ref.double().norm()), 1e-30))


@dataclass
class Prepared:
    """A peer after its first run: the record so far, and the thunk to time (``None`` when unavailable)."""

    peer: Peer
    record: dict[str, Any]
    fn: Thunk | None


def prepare(peer: Peer, spec: BenchSpec, inputs: Mapping[str, Any], reference: Mapping[str, Any] | None,
            synchronize: Callable[[], None] = lambda: None) -> Prepared:
    """Build and run ``peer`` once on ``inputs``. Any exception (a backend that refuses the shape, dtype or
    GPU, out of memory) makes it unavailable with the reason, torch's warnings included. Its outputs are
    compared with ``peer.reference`` or else ``reference`` (the spec's); ``agrees`` says whether every relative
    error is within ``spec.reference_tol``."""
    record: dict[str, Any] = {"label": peer.label, "name": peer.name}
    if peer.note:
        record["note"] = peer.note
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn = peer.build(spec, inputs)
            out = fn()
            synchronize()
        except Exception as exc:
            said = [str(w.message).strip() for w in caught]
            reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            record.update(available=False, reason="; ".join([reason, *said])[:600])
            return Prepared(peer, record, None)
    record["available"] = True
    want = peer.reference(spec, inputs) if peer.reference is not None else reference
    if want is not None:
        errs = {name: rel_err(value, want[name]) for name, value in out.items() if name in want}
        record["rel_err"] = errs
        record["tol"] = spec.reference_tol
        record["agrees"] = bool(errs) and all(e <= spec.reference_tol for e in errs.values())
    return Prepared(peer, record, fn)


def time_beside(peers: Sequence[Peer], spec: BenchSpec, inputs: Mapping[str, Any],
                reference: Mapping[str, Any] | None, launchers: Sequence[Callable[[], Any]], *, rounds: int,
                reps: int, flush: Any, synchronize: Callable[[], None]
                ) -> tuple[list[list[list[float]]], list[dict[str, Any]]]:
    """``peers`` (of ``spec``: :func:`peers_for`) prepared on ``inputs`` (:func:`prepare`) and timed interleaved
    with ``launchers`` (the kernel first; ``kbuild bench`` passes it twice, its A/A control) in the same rounds
    (:func:`kbuild.device.timing.time_interleaved`), each timed peer summarised against the first launcher
    (:func:`summarize`). ``(the launchers' samples, each peer's record)``."""
    from kbuild.device import timing

    prepared = [prepare(p, spec, inputs, reference, synchronize) for p in peers]
    timed = [p for p in prepared if p.fn is not None]
    samples = timing.time_interleaved([*launchers, *[p.fn for p in timed if p.fn is not None]], rounds=rounds,
                                      reps=reps, flush=flush)
    ours, theirs = samples[:len(launchers)], samples[len(launchers):]
    for p, peer_samples in zip(timed, theirs, strict=True):
        p.record.update(summarize(ours[0], peer_samples))
    return ours, [p.record for p in prepared]


def summarize(kernel_ms: Sequence[Sequence[float]], peer_ms: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Timing fields of a peer's record from samples interleaved with the kernel's (``[round][rep]`` each):
    its median, and ``ratio`` = median(peer) / median(kernel), > 1 when the kernel is faster, with its 95%
    bootstrap interval over rounds."""
    ratio, lo, hi = stats.ratio_ci(kernel_ms, peer_ms)
    return {"median_ms": stats.median(peer_ms), "ratio": ratio, "ratio_ci": [lo, hi], "samples_ms": list(peer_ms)}
