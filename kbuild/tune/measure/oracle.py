"""The correctness oracle: does a candidate compute bit for bit what the untouched baseline computes?

Device-agnostic (it takes the device and a synchronise function), so the same code runs in the GPU
worker and, with Triton's interpreter, in CPU tests. For each of K fresh input sets it runs the
baseline and then the candidate, each on private copies of the inputs, with

* every output poisoned (NaN, or -1 for integers) before the launch, except those the kernel updates in place
  (:attr:`~kbuild.bench.spec.BenchSpec.inplace`), which keep their values,
* a guard band of random bytes after every output buffer, which must be intact afterwards (a strided output keeps
  its strides: the band follows the last element it reaches),
* inputs compared afterwards with their originals (a candidate must not write them),

and compares the outputs bitwise (or within the spec's declared :class:`~kbuild.bench.spec.Tolerance`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbuild.bench.spec import BenchSpec, Config, storage_span, validate_inputs

_INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


class BaselineProblem(Exception):
    """The baseline itself misbehaves (unwritten outputs, guard band, modified inputs)."""


class Oracle:
    def __init__(self, spec: BenchSpec, config: Config, *, device: str = "cuda",
                 synchronize: Callable[[], None] | None = None) -> None:
        import torch

        self.torch = torch
        self.spec = spec
        self.config = config
        self.device = device
        self.grid = spec.grid(spec.all_constexprs(config))
        self.synchronize = synchronize or (lambda: None)

    def launch(self, kernel: Any, inputs: dict[str, Any]) -> None:
        kernel[self.grid](*self.spec.launch_args(inputs, self.config))

    def _guarded(self, inputs: dict[str, Any], seed: int) -> dict[str, tuple[Any, Any]]:
        """Replace each output by a view into a larger buffer whose tail (the guard band) holds random bytes."""
        torch = self.torch
        gen = torch.Generator(device=self.device).manual_seed(seed)
        guards = {}
        for name in self.spec.outputs:
            t = inputs[name]
            n = storage_span(t.shape, t.stride())
            guard = max(4096 // t.element_size(), 1024)
            buf = torch.empty(n + guard, dtype=t.dtype, device=self.device)
            tail = buf[n:].view(torch.uint8)
            pattern = torch.randint(0, 256, tail.shape, dtype=torch.uint8, device=self.device, generator=gen)
            tail.copy_(pattern)
            view = buf[:n].as_strided(t.shape, t.stride())
            if name in self.spec.inplace:
                view.copy_(t)
            inputs[name] = view
            guards[name] = (tail, pattern)
        return guards

    def _poison(self, inputs: dict[str, Any]) -> None:
        for name in self.spec.outputs:
            if name in self.spec.inplace:
                continue
            t = inputs[name]
            t.fill_(float("nan") if t.is_floating_point() else -1)

    def _copy(self, t: Any) -> Any:
        """A private copy of tensor ``t`` with the same shape and strides (``clone`` makes a view with gaps
        contiguous)."""
        buf = self.torch.empty(storage_span(t.shape, t.stride()), dtype=t.dtype, device=t.device)
        out = buf.as_strided(t.shape, t.stride())
        out.copy_(t)
        return out

    def run_once(self, kernel: Any, inputs: dict[str, Any], seed: int) -> tuple[dict[str, Any], str | None]:
        """Poison, launch, synchronise; the outputs (copies), or a guard-band or modified-input complaint."""
        torch = self.torch
        run_inputs = {k: (self._copy(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        guards = self._guarded(run_inputs, seed)
        self._poison(run_inputs)
        self.launch(kernel, run_inputs)
        self.synchronize()
        for name, (tail, pattern) in guards.items():
            if not torch.equal(tail, pattern):
                bad = int((tail != pattern).sum())
                return {}, f"wrote {bad} byte(s) past the end of output {name!r} (guard band)"
        for name, value in inputs.items():
            if name not in self.spec.outputs and isinstance(value, torch.Tensor):
                if not torch.equal(value, run_inputs[name]):
                    return {}, f"modified input {name!r}"
        return {name: run_inputs[name].clone() for name in self.spec.outputs}, None

    def compare(self, want: dict[str, Any], got: dict[str, Any]) -> str | None:
        torch = self.torch
        for name, tol in self.spec.outputs.items():
            a, b = want[name], got[name]
            if tol is None:
                ia = a.view(getattr(torch, _INT_VIEW[a.element_size()]))
                ib = b.view(getattr(torch, _INT_VIEW[b.element_size()]))
                if not torch.equal(ia, ib):
                    bad = int((ia != ib).sum())
                    nan = int(torch.isnan(b).sum()) if b.is_floating_point() else 0
                    extra = f", {nan} left unwritten (NaN poison)" if nan else ""
                    return f"output {name!r}: {bad} of {a.numel()} element(s) differ bitwise from the baseline{extra}"
            else:
                close = torch.isclose(b.float(), a.float(), rtol=tol.rtol, atol=tol.atol)
                if not bool(close.all()):
                    return f"output {name!r}: {int((~close).sum())} element(s) outside the tolerance {tol}"
        return None

    def baseline_sanity(self, baseline: Any, seed: int = 7) -> dict[str, Any]:
        """Run the baseline once: every output element written; its error against the spec's reference."""
        inputs = self.spec.make_inputs(seed, self.device)
        validate_inputs(self.spec, inputs)
        outs, problem = self.run_once(baseline, inputs, seed)
        if problem:
            raise BaselineProblem(f"the baseline itself {problem}")
        for name, t in outs.items():
            if t.is_floating_point() and bool(self.torch.isnan(t).any()):
                raise BaselineProblem(f"the baseline leaves output {name!r} partly unwritten (NaN after poisoning)")
        details: dict[str, Any] = {}
        if self.spec.reference is not None:
            ref = self.spec.reference(inputs)
            for name in self.spec.outputs:
                r = ref[name].double()
                details[f"rel_err_{name}"] = float((outs[name].double() - r).norm() / max(float(r.norm()), 1e-30))
        return details

    def check(self, baseline: Any, candidate: Any, k: int, seed: int) -> dict[str, Any]:
        """``{"valid", "k", "reason"}`` after up to ``k`` input sets (stops at the first failure)."""
        for i in range(k):
            s = seed * 1000 + i + 11
            inputs = self.spec.make_inputs(s, self.device)
            want, problem = self.run_once(baseline, inputs, s)
            if problem:
                raise BaselineProblem(f"the baseline {problem} (input set {i})")
            got, problem = self.run_once(candidate, inputs, s)
            if problem is None:
                problem = self.compare(want, got)
            if problem:
                return {"valid": False, "k": i + 1, "reason": f"input set {i}: {problem}"}
        return {"valid": True, "k": k, "reason": None}
