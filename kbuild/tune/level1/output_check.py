"""Constexprs shown safe by checking outputs: :class:`RecordedOutputCheck`, the
:class:`~kbuild.tune.level1.derive.OutputCheck` of a recorded specialisation.

:func:`~kbuild.tune.level1.derive.constexpr_candidates` proposes other values of a kernel's block-size constexprs
(half and twice the recorded one). A package's caller computes its grid and masks for its own value, and the run
time would serve the tuned cubin to that caller, with that grid, for every call of the same key. So a value joins
the derived space only when, on **every recorded call of the specialisation** (distinct shapes, at most
:data:`MAX_SAMPLES`: the smallest, the largest and some between), launched **with the recorded grid**:

* each output is within the tolerance of the recorded configuration's own output on the same inputs
  (:func:`kbuild.bench.tolerance.config_tolerance` by dtype and reduction length; exact for integer outputs);
* nothing is written past the end of an output (a guard band of random bytes after each, which must be intact)
  and no input is modified;
* every output element the recorded configuration writes is written (outputs are poisoned with NaN first).

A block that shrinks below what a one-pass kernel covers leaves elements unwritten; one that grows past an
unmasked store writes into the guard band; a loop over blocks passes at any value. What no sample can show
(a call of the same key with a shape none recorded) is not claimed: the report says the check ran on the
recorded calls.

Where it runs (:func:`where_to_check`), always in a child process (a candidate that faults on the GPU, hangs or
takes tens of GiB does so there, and refuses itself; the build's process never holds a CUDA context for it): on a
GPU of the target's SM (the tune phase of a build on a GPU machine, a prewarm node); else under Triton's
interpreter (``TRITON_INTERPRET=1``), on the CPU, when the recorded calls' tensors fit
:data:`INTERPRETER_MAX_BYTES`; else nowhere, and the candidates stay out of the space with that reason. A child
that fails or times out (:data:`CHILD_TIMEOUT_S`) accepts nothing. Each verdict says where it was reached. The check is :class:`~kbuild.tune.measure.oracle.Oracle`'s
poisoning and guard bands, the recorded spec's inputs and grid (:func:`kbuild.bench.recorded.spec_from_recording`).

Run as ``python -m kbuild.tune.level1.output_check`` it reads one request (JSON) on standard input and writes the
verdicts (JSON) on standard output: the child.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .subject import Subject

#: Recorded calls (distinct shapes) each candidate is checked on, at most.
MAX_SAMPLES = 4
#: Tensor bytes of the recorded calls above which Triton's interpreter (on the CPU) is not tried.
INTERPRETER_MAX_BYTES = 8 << 20
#: Seed of the inputs the check runs on.
CHECK_SEED = 11
#: Seconds the child may take.
CHILD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Verdict:
    """One candidate's verdict: accepted or not, why, and where the check ran."""

    candidate: Mapping[str, Any]
    accepted: bool
    why: str
    where: str

    def as_dict(self) -> dict[str, Any]:
        return {"constexprs": dict(self.candidate), "accepted": self.accepted, "why": self.why, "where": self.where}


@dataclass(frozen=True)
class Request:
    """What the check needs (plain data: it crosses to the child)."""

    recording: str
    function: str
    specialization: str
    target: str
    candidates: tuple[Mapping[str, Any], ...]
    samples: tuple[int, ...]
    captures: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "candidates": [dict(c) for c in self.candidates],
                "samples": list(self.samples)}


def chosen_samples(samples: Sequence[Mapping[str, Any]], limit: int = MAX_SAMPLES) -> list[int]:
    """Indices of at most ``limit`` distinct samples (arguments and grid): the smallest, the largest and evenly
    spaced ones between (by tensor bytes, then index)."""
    from kbuild.bench.recorded_inputs import tensor_bytes

    seen: dict[str, int] = {}
    for i, s in enumerate(samples):
        seen.setdefault(json.dumps(s, sort_keys=True, default=str), i)
    order = sorted(seen.values(), key=lambda i: (tensor_bytes(samples[i]), i))
    if len(order) <= limit:
        return order
    step = (len(order) - 1) / (limit - 1)
    return sorted({order[round(k * step)] for k in range(limit)}, key=order.index)


def check(request: Request, device: str) -> list[Verdict]:
    """Run the check (the module docstring) on ``device`` ("cuda", or "cpu" under Triton's interpreter), in this
    process: the child's work (:func:`main`)."""
    import torch

    from kbuild.bench.recorded import recorded_spec
    from kbuild.bench.spec import settled
    from kbuild.bench.tolerance import within
    from kbuild.tune.measure.oracle import Oracle

    where = f"{device}, {len(request.samples)} recorded call(s)"
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    failed: dict[int, str] = {}
    for sample in request.samples:
        spec = settled(recorded_spec(request.recording, request.function, request.specialization,
                                     sample=str(sample), target=request.target, captures=request.captures or ""),
                       device)
        base = spec.configs[0]
        inputs = spec.make_inputs(CHECK_SEED, device)
        want, problem = Oracle(spec, base, device=device, synchronize=sync).run_once(spec.fn, inputs, CHECK_SEED)
        if problem:
            return [Verdict(c, False, f"not checked: the recorded configuration itself {problem} (sample {sample})",
                            where) for c in request.candidates]
        for i, cand in enumerate(request.candidates):
            if i in failed:
                continue
            config = dataclasses.replace(base, constexprs={**base.constexprs, **cand})
            try:
                got, problem = Oracle(spec, config, device=device, synchronize=sync).run_once(spec.fn, inputs,
                                                                                               CHECK_SEED)
            except Exception as exc:  # a value the kernel cannot compile or launch with
                problem = f"does not compile or launch: {type(exc).__name__}: {str(exc)[:200]}"
            for name in spec.outputs if not problem else ():
                ok, err = within(got[name], want[name], spec.tolerance(name))
                if not ok:
                    problem = (f"output {name!r}: relative error {err:.3g} > {spec.tolerance(name):.3g}"
                               + (" (elements left unwritten)" if got[name].is_floating_point()
                                  and bool(torch.isnan(got[name]).any()) else ""))
                    break
            if problem:
                failed[i] = f"sample {sample}: {problem}"
    return [Verdict(c, i not in failed, failed.get(i, "outputs within tolerance of the recorded configuration's, "
                                                      "guard bands intact, inputs untouched"), where)
            for i, c in enumerate(request.candidates)]


def where_to_check(target_cc: int, tensor_bytes: int) -> tuple[str | None, str]:
    """``(device, why)``: ``"cuda"`` where the CUDA driver reports a GPU of ``target_cc``
    (:func:`kbuild.device.probe.has_gpu`: no context is made in this process), ``"cpu"`` (Triton's interpreter) where
    the recorded calls' ``tensor_bytes`` fit :data:`INTERPRETER_MAX_BYTES`, else None with the reason."""
    from kbuild.device.probe import has_gpu

    if has_gpu(target_cc):
        return "cuda", f"on this machine's sm_{target_cc} GPU"
    if tensor_bytes <= INTERPRETER_MAX_BYTES:
        return "cpu", "under Triton's interpreter on the CPU (no GPU of the target here)"
    return None, (f"no sm_{target_cc} GPU here, and the recorded calls' {tensor_bytes / 2**20:.1f} MiB of tensors "
                  f"exceed the {INTERPRETER_MAX_BYTES >> 20} MiB Triton's interpreter is given: checked where the "
                  "build tunes on such a GPU")


class RecordedOutputCheck:
    """The :class:`~kbuild.tune.level1.derive.OutputCheck` of one recorded specialisation (the module docstring);
    its :attr:`verdicts` stay for the report."""

    def __init__(self, recording: str | os.PathLike[str], kernel: Any, specialization: Any, *, target: str,
                 captures: str | os.PathLike[str] | None = None) -> None:
        from kbuild.bench.recorded import samples_of

        self.recording = str(Path(recording).resolve())
        self.kernel, self.specialization, self.target = kernel, specialization, target
        self.captures = str(captures) if captures else None
        self.samples = samples_of(kernel, specialization)
        self.verdicts: list[Verdict] = []

    def __call__(self, subject: Subject, candidates: Sequence[Mapping[str, Any]]) -> list[tuple[bool, str]]:
        from kbuild.bench.recorded_inputs import tensor_bytes

        picked = chosen_samples(self.samples)
        request = Request(self.recording, self.kernel.function, self.specialization.id, self.target,
                          tuple(dict(c) for c in candidates), tuple(picked), self.captures)
        device, why = where_to_check(subject.target.cc, sum(tensor_bytes(self.samples[i]) for i in picked))
        if not picked:
            device, why = None, "no recorded call to check on"
        if device is None:
            verdicts = [Verdict(c, False, f"not checked: {why}", "nowhere") for c in candidates]
        else:
            run_on = device
            verdicts = _guarded(lambda: _in_child(request, run_on), candidates, why)
        self.verdicts = verdicts
        return [(v.accepted, f"{v.why} ({v.where})") for v in verdicts]


def _guarded(run: Any, candidates: Sequence[Mapping[str, Any]], where: str) -> list[Verdict]:
    try:
        verdicts: list[Verdict] = run()
        return verdicts
    except Exception as exc:  # the check could not run: nothing is accepted, and the report says why
        why = f"not checked: the check failed {where}: {type(exc).__name__}: {str(exc)[:300]}"
        return [Verdict(c, False, why, "nowhere") for c in candidates]


def _in_child(request: Request, device: str) -> list[Verdict]:
    """:func:`check` in a child process on ``device`` (``"cpu"``: under Triton's interpreter)."""
    # the child imports the kernel's module as this process did: by this process's import path
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("TRITON_INTERPRET", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-m", __name__], input=json.dumps({**request.as_dict(), "device": device}),
                          env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0:  # the traceback's last line names the exception (Triton's interpreter lacks some ops)
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the check's child exited {done.returncode}: {last[-300:]}")
    return [Verdict(v["constexprs"], bool(v["accepted"]), str(v["why"]), str(v["where"]))
            for v in json.loads(done.stdout)]


def interpreter_index_fix() -> None:
    """Triton 3.6's interpreter turns a scalar tensor into an index (a ``range`` bound in a kernel's loop) with
    ``int()`` of a one-element array, which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted"):
    every ``for`` over a runtime bound fails under the interpreter. triton-lang/triton#9171 (fixed after 3.6) reads
    the element with ``squeeze()``; the child under the interpreter applies that one line, and nothing else runs
    in it."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "kbuild_index_fix", False):
        return

    def patch(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch.kbuild_index_fix = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch


def main() -> int:
    """The child: a :class:`Request` (and ``device``) on standard input, the verdicts on standard output."""
    doc = json.load(sys.stdin)
    device = str(doc.get("device", "cpu"))
    if device == "cpu":
        interpreter_index_fix()
    request = Request(doc["recording"], doc["function"], doc["specialization"], doc["target"],
                      tuple(doc["candidates"]), tuple(doc["samples"]), doc.get("captures"))
    verdicts = check(request, device)
    prefix = "Triton's interpreter, " if device == "cpu" else ""
    json.dump([dataclasses.replace(v, where=f"{prefix}{v.where}").as_dict() for v in verdicts], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["INTERPRETER_MAX_BYTES", "MAX_SAMPLES", "RecordedOutputCheck", "Request", "Verdict", "check",
           "chosen_samples", "where_to_check"]
