"""Tuned SASS in nvcc's objects: the cubin of a declared ``__global__`` function replaced before ``fatbinary``.

A project declares kernels in ``[[tool.kbuild.cuda.kernels]]`` (:class:`kbuild.settings.model.CudaKernelSettings`). When
kbuild-nvcc compiles the ``source`` of one, after each ``ptxas`` step of the plan (run or answered from the store)
:meth:`CudaTuning.after_ptxas`:

1. finds the kernel in the cubin: every ``.text.<symbol>`` section's symbol demangled (libstdc++'s
   ``__cxa_demangle``, as ``c++filt``), compared with ``function`` without parameter list and namespace
   (:func:`matches`); none or several is a :class:`~kbuild.errors.ConfigError` naming the file and key;
2. computes the tuned key (:func:`tuned_key`): the sha256 of the cubin ptxas wrote (the untouched one), the exact
   target, the symbol, the configuration level's points (``maxrregcount``/``minnctapersm``) and the tuner's
   component (:func:`kbuild.key.tuner_component`: version, algorithm, seed, budget, edit kinds), as for Triton
   kernels;
3. looks the key up in the store. A hit that carries an accepted schedule (``tuned``) is written over ptxas's
   cubin, so ``fatbinary`` (a later step of the plan) embeds it and the object, the extension and the wheel carry
   it. On a miss with ``tune`` not ``off``, a bench spec, and a GPU of that target on this machine, the tuner runs
   (:func:`tune_kernel`: the configuration level by re-running ptxas with each point's flags on the same PTX, each
   variant checked bit-exact against the untouched cubin and timed against it in the measurement worker, then the
   SASS level on the fastest; the final cubin is checked and timed once more against the untouched cubin, which is
   the speedup the record claims) and its result, accepted or not, is stored under the key. Without a GPU the
   cubin ships as ptxas wrote it; ``tune = "require"`` then fails naming the kernel and target. A tuning run that
   fails (the measurement worker cannot load or measure the baseline) is the same as no GPU: under ``auto`` ptxas's
   cubin ships with a warning and nothing is stored (the next compile tries again), under ``require`` it fails.

Several declared kernels of one unit are applied in declaration order, each keyed on the cubin as the previous
one left it. Each shipped kernel × target gets a record (:data:`RECORD_FORMAT`), in the launcher's log and, with
``KBUILD_NVCC_RECORDS``, as a JSON file that :func:`kbuild.build.manifest.cuda_entries` turns into manifest entries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbuild.errors import ConfigError, KBuildError, UntunedError

if TYPE_CHECKING:  # the launcher runs for every nvcc step: the settings model is imported where it is read
    from kbuild.settings.model import TuneRequest

log = logging.getLogger(__name__)

#: The artefact kind of a tuning result of a CUDA C++ kernel.
KIND_TUNED = "nvcc-tuned"
#: Format of the records the launcher writes per declared kernel × target.
RECORD_FORMAT = "kbuild-nvcc-record/1"
#: Bumped when the tuned key's components change.
TUNED_KEY_SCHEMA = 1

_ANON = "(anonymous namespace)::"


# ----------------------------------------------------------------------------------------------
# Finding the kernel


@functools.cache
def _cxa_demangle() -> Any:
    name = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    fn = lib.__cxa_demangle
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_void_p
    return fn


def demangle(symbol: str) -> str:
    """The symbol as ``c++filt`` prints it (the symbol itself when it is not a mangled C++ name)."""
    fn = _cxa_demangle()
    if fn is None:  # no libstdc++ here: binutils' c++filt
        try:
            out = subprocess.run(["c++filt", symbol], capture_output=True, text=True, check=True).stdout.strip()
            return out or symbol
        except (OSError, subprocess.CalledProcessError):
            return symbol
    status = ctypes.c_int(0)
    ptr = fn(symbol.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return symbol
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free(ptr)


def _strip_params(name: str) -> str:
    """``ns::f<1, 2>(float*, int)`` → ``ns::f<1, 2>`` (the last balanced parenthesis group at the end)."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        c = name[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return name[:i]
    return name


def _unreturned(name: str) -> str:
    """Without the return type that template instances demangle with (``void f<1>(int)``: kernels return void)."""
    name = name.strip()
    return name[len("void "):] if name.startswith("void ") else name


def _norm(name: str) -> str:
    return "".join(_unreturned(name).replace(_ANON, "").split())


def matches(declared: str, demangled: str) -> bool:
    """Whether ``declared`` (a ``function`` value) names the demangled symbol: the whole name, or the name without
    its parameter list; ``(anonymous namespace)::``, a template instance's ``void`` return type and blanks ignored. ``"gelu"`` matches
    ``(anonymous namespace)::gelu(__half const*, __half*, long long)``; ``"f<64,64>"`` matches ``f<64, 64>(...)``."""
    want = _norm(declared)
    return want in (_norm(demangled), _norm(_strip_params(demangled)))


def find_symbol(cubin: bytes, declared: str, *, where: str, key: str) -> str:
    """The mangled symbol of the kernel ``declared`` names in ``cubin``; a :class:`ConfigError` naming ``where``
    (the pyproject) and ``key`` when none or several match."""
    from kbuild.sass.elf import Cubin

    kernels = Cubin(cubin, "cubin").kernels()
    names = {k: demangle(k) for k in kernels}
    found = [k for k, d in names.items() if matches(declared, d)]
    if len(found) == 1:
        return found[0]
    shown = ", ".join(sorted(_strip_params(_unreturned(d)).replace(_ANON, "") for d in names.values())) or "none"
    if not found:
        raise ConfigError(where, key, f"no __global__ function {declared!r} in the compiled cubin (its kernels: "
                                      f"{shown})")
    raise ConfigError(where, key, f"{declared!r} names {len(found)} kernels of the cubin ({shown}); give the "
                                  "template arguments or the parameter list")


# ----------------------------------------------------------------------------------------------
# The key


def tuned_key(*, cubin: bytes, arch: str, cc: int, symbol: str, points: list[dict[str, int]],
              tuner: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(hex key, components) of a tuning result of ``symbol`` in ``cubin`` (the untouched one ptxas wrote)."""
    from kbuild.key import digest

    components = {"schema": TUNED_KEY_SCHEMA, "kind": KIND_TUNED,
                  "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "symbol": symbol,
                  "target": {"arch": arch, "cc": cc}, "space": points, "tuner": dict(tuner)}
    return digest(components), components


# ----------------------------------------------------------------------------------------------
# Tuning one kernel


@dataclass
class TuneOutcome:
    """What :func:`tune_kernel` found: the cubin to ship, whether it is an accepted schedule, and the evidence."""

    cubin: bytes
    accepted: bool
    speedup: float | None
    reason: str
    config: dict[str, int]
    backend: str
    report: dict[str, Any]
    seconds: float


def ptxas_variant(argv: Sequence[str], point: Mapping[str, int], *, env: Mapping[str, str], cwd: Path) -> bytes:
    """The cubin of ``argv`` (a ptxas command of the plan) re-run with the point's ``--maxrregcount`` /
    ``--minnctapersm`` (each replacing any the command had) into a temporary file."""
    flags = {"maxrregcount": point.get("maxrregcount", 0), "minnctapersm": point.get("minnctapersm", 0)}
    args: list[str] = []
    skip = False
    out_given = False
    for a in argv:
        if skip:
            skip = False
            continue
        bare = a.lstrip("-").split("=", 1)[0]
        if flags.get(bare):
            skip = "=" not in a
            continue
        if a in ("-o", "--output-file"):
            skip, out_given = True, True
            continue
        args.append(a)
    if not out_given:
        raise KBuildError(f"kbuild-nvcc: the ptxas command writes no -o: {' '.join(argv)}")
    with tempfile.TemporaryDirectory(prefix="kbuild-ptxas-") as tmp:
        out = Path(tmp) / "variant.cubin"
        extra = [f"--{k}={v}" for k, v in flags.items() if v]
        proc = subprocess.run([*args, *extra, "-o", str(out)], cwd=cwd, env=dict(env), capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise KBuildError(f"kbuild-nvcc: ptxas with {' '.join(extra)} failed ({proc.returncode}): "
                              f"{proc.stderr.strip()[:500]}")
        return out.read_bytes()


def tune_kernel(request: TuneRequest, *, cubin: bytes, symbol: str, bench: str, python_path: Sequence[str],
                variants: Mapping[str, bytes] | None = None, backend: Any | None = None) -> TuneOutcome:
    """Tune ``symbol`` of ``cubin`` (the untouched cubin ptxas wrote) within ``request`` (the project's tuning
    request, :meth:`kbuild.settings.model.Settings.tune_request`).

    ``variants``: the configuration level's other compiles (label → cubin, :func:`ptxas_variant`). ``backend``: a
    measurement backend (:class:`kbuild.tune.measure.client.WorkerClient`); None runs the SASS search on the CPU
    cost model, whose result never ships (``accepted`` is False: only a GPU run decides). On a GPU backend every
    variant is checked bit-exact against the untouched cubin and timed against it, the fastest significant one is
    the start of the SASS search, and the search's result is checked and timed once more against the untouched
    cubin: that ratio is the speedup claimed.

    A cubin with a wgmma register race (:func:`kbuild.sass.hazards.register_wgmma_hazards`, triton-lang/triton#9433) is never accepted by its
    bit-exact check, which a racy kernel can pass by luck: when the untouched cubin has one, it ships as it is
    (nothing is loaded, tried or searched; the reason names the race), and a variant with one is not checked, timed
    or started from (its ``level1`` entry says ``racy``)."""
    from kbuild.sass.hazards import WGMMA_RACE_ISSUE, recorded, register_wgmma_hazards
    from kbuild.tune.accept import decide, racy_baseline
    from kbuild.tune.measure.backend import K_ACCEPT, MODEL_BACKEND, KernelRef

    started = time.monotonic()
    races = register_wgmma_hazards(cubin, symbol)
    if races:  # before the backend loads anything, as the SASS tuner does (kbuild.tune.api.tune)
        decision = racy_baseline(races, what="a ptxas variant or schedule of it")
        return TuneOutcome(cubin, False, None, decision.reason, _point("as compiled"),
                           backend.name if backend is not None else MODEL_BACKEND,
                           {"level1": {}, "start": "as compiled", "decision": decision.as_dict()},
                           time.monotonic() - started)
    from kbuild.tune.api import tune

    ref = KernelRef(spec=bench, python_path=tuple(python_path), symbol=symbol)
    levels: dict[str, Any] = {}
    start, start_label = cubin, "as compiled"
    if backend is not None:
        backend.load(ref, cubin)
        best = 1.0
        for label, data in (variants or {}).items():
            found = register_wgmma_hazards(data, symbol)
            if found:
                levels[label] = {"status": "racy", "wgmma_register_hazards": recorded(found),
                                 "reason": f"the variant's cubin has a wgmma register race ({WGMMA_RACE_ISSUE}) at "
                                           f"{found[0]}; not checked, timed or started from"}
                continue
            chk = backend.check(data, K_ACCEPT, seed=20_000)
            t = backend.time(data, rounds=10, reps=20) if chk.valid else None
            levels[label] = {"check": chk.as_dict(), "ratio": t.ratio if t else None,
                             "significant": bool(t and t.significant)}
            if t is not None and t.significant and t.ratio < best:
                best, start, start_label = t.ratio, data, label
    result = tune(start, request, kernel=symbol, backend=backend, kernel_ref=ref if backend is not None else None)
    final = result.cubin if result.accepted else start
    report = {"level1": levels, "start": start_label, "level2": result.report()}
    if backend is None:
        return TuneOutcome(cubin, False, None, result.decision.reason, _point(start_label), result.backend, report,
                           time.monotonic() - started)
    if final == cubin:
        return TuneOutcome(cubin, False, None, result.decision.reason, _point("as compiled"), result.backend, report,
                           time.monotonic() - started)
    backend.load(ref, cubin)  # the last word: the shipped cubin against the untouched one
    check = backend.check(final, K_ACCEPT, seed=30_000 + request.seed)
    timing = backend.time(final, rounds=15, reps=20) if check.valid else None
    decision = decide(verifier_problems=[], check=check, timing=timing)
    report["final"] = decision.as_dict()
    return TuneOutcome(final if decision.accepted else cubin, decision.accepted,
                       decision.speedup if decision.accepted else None, decision.reason,
                       _point(start_label if decision.accepted else "as compiled"), result.backend, report,
                       time.monotonic() - started)


def _point(label: str) -> dict[str, int]:
    out = {"maxrregcount": 0, "minnctapersm": 0}
    if label != "as compiled":
        for part in label.split(","):
            k, _, v = part.partition("=")
            out[k] = int(v)
    return out


def point_label(point: Mapping[str, int]) -> str:
    """``maxrregcount=64,minnctapersm=2`` (only the flags given); ``as compiled`` for neither."""
    parts = [f"{k}={v}" for k, v in point.items() if v]
    return ",".join(parts) or "as compiled"


# ----------------------------------------------------------------------------------------------
# The launcher's side


def project_for(source: Path, explicit: Path | None) -> Path | None:
    """The pyproject.toml to read ``[tool.kbuild.cuda]`` from: ``explicit`` (KBUILD_NVCC_PROJECT), else the nearest
    one above ``source`` that has a ``[tool.kbuild]`` table."""
    if explicit is not None:
        return explicit
    for d in source.resolve().parents:
        cand = d / "pyproject.toml"
        if cand.is_file():
            try:
                if "[tool.kbuild" in cand.read_text(encoding="utf-8", errors="replace"):
                    return cand
            except OSError:
                return None
    return None


def compiled_sources(args: Sequence[str], cwd: Path) -> list[Path]:
    """The ``.cu`` files an nvcc command line compiles."""
    out = []
    for a in args:
        if not a.startswith("-") and a.endswith(".cu"):
            p = Path(a) if os.path.isabs(a) else cwd / a
            if p.is_file():
                out.append(p.resolve())
    return out


class CudaTuning:
    """The declared kernels of one nvcc invocation and what was done with each (see the module docstring)."""

    def __init__(self, settings: Any, kernels: list[Any], *, store: Any, emit: Any) -> None:
        self.settings = settings
        self.kernels = kernels
        self.store = store
        self.emit = emit
        self.records: list[dict[str, Any]] = []

    @classmethod
    def for_invocation(cls, args: Sequence[str], cwd: Path, *, store: Any, emit: Any) -> CudaTuning | None:
        """The declarations that apply to this compile (None: none do, or there is no project)."""
        from kbuild.settings.sources import load_settings
        from kbuild.settings.variables import env_setting

        sources = compiled_sources(args, cwd)
        if not sources:
            return None
        pyproject = project_for(sources[0], env_setting("nvcc_project"))
        if pyproject is None:
            return None
        settings = load_settings(pyproject, require_table=False)
        mine = [(i, k) for i, k in enumerate(settings.cuda.kernels)
                if (settings.project_dir / k.source).resolve() in sources]
        return cls(settings, mine, store=store, emit=emit) if mine else None

    def digest(self) -> str:
        """What the direct mode's key must cover: the declarations and the tuner's settings."""
        from kbuild.canonical import canonical_json
        from kbuild.key import tuner_component
        from kbuild.tune import TUNER_VERSION

        decl = [[i, k.name, k.function, k.source, k.bench, k.points()] for i, k in self.kernels]
        return hashlib.sha256(canonical_json({"decl": decl, "tune": self.settings.tune,
                                              "tuner": tuner_component(self.settings, version=TUNER_VERSION)},
                                             ascii_only=True)).hexdigest()

    def after_ptxas(self, cubin_path: Path, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> None:
        """Apply every declared kernel to the cubin ptxas just wrote (see the module docstring)."""
        from kbuild.device.probe import has_gpu
        from kbuild.key import tuner_component
        from kbuild.sass.elf import Cubin
        from kbuild.tune import TUNER_VERSION

        data = cubin_path.read_bytes()
        elf = Cubin(data, str(cubin_path))
        tuner = tuner_component(self.settings, version=TUNER_VERSION)
        for i, k in self.kernels:
            t0 = time.perf_counter()
            symbol = find_symbol(data, k.function, where=self.settings.config_file, key=f"cuda.kernels[{i}].function")
            key, components = tuned_key(cubin=data, arch=elf.arch, cc=elf.sm, symbol=symbol, points=k.points(),
                                        tuner=tuner)
            art = self.store.get(key)
            action = "tuned-hit"
            failed = None
            if art is None and self._can_tune(k, elf.sm, has_gpu):
                try:
                    art = self._tune(k, data, symbol, key, components, argv, env=env, cwd=cwd)
                    action = "tuned-stored"
                except KBuildError as exc:  # as the Triton pipeline: ptxas's cubin ships, nothing is stored
                    failed = f"tuning failed: {exc}"
            if art is None:
                state, shipped = "baseline", data
                action = "untuned"
                why = failed or self._why_untuned(k, elf.arch)
                if self.settings.tune == "require":
                    raise UntunedError(f"{self.settings.config_file}: cuda.kernels[{i}] ({k.name}) would ship untuned "
                                       f"for {elf.arch} ({why}), and tune = \"require\"")
                print(f"kbuild-nvcc: {k.name} ({elf.arch}) ships untuned: {why}", file=sys.stderr)
            else:
                ok = self._usable(art, data, elf.sm, symbol)
                state = "tuned" if ok else "baseline-kept"
                shipped = art.cubin if ok else data
            if shipped != data:
                cubin_path.write_bytes(shipped)
            record = {"format": RECORD_FORMAT, "kernel": k.name, "function": k.function, "symbol": symbol,
                      "source": k.source, "target": f"sm_{elf.sm}", "arch": elf.arch, "key": key,
                      "baseline_cubin_sha256": hashlib.sha256(data).hexdigest(),
                      "cubin_sha256": hashlib.sha256(shipped).hexdigest(), "cubin_bytes": len(shipped),
                      "state": state, "speedup": art.meta.get("speedup") if art is not None and state == "tuned" else None,
                      "config": art.meta.get("config") if art is not None and state == "tuned" else None}
            self.records.append(record)
            self.emit("tune", elf.arch, action, time.perf_counter() - t0, kernel=k.name, key=key, state=state)
            data = shipped
            elf = Cubin(data, str(cubin_path))

    def _can_tune(self, k: Any, cc: int, has_gpu: Any) -> bool:
        return self.settings.tune != "off" and bool(k.bench) and has_gpu(cc)

    def _why_untuned(self, k: Any, arch: str) -> str:
        return ("tune = \"off\"" if self.settings.tune == "off" else
                "no bench spec" if not k.bench else f"no {arch} GPU on this machine")

    def answers(self, records: Sequence[Mapping[str, Any]]) -> list[str] | None:
        """Whether an object whose compile shipped ``records`` is still what compiling the unit gives now (the direct
        mode's check; its key already covers the declarations and the tuner's settings): every kernel that shipped
        untuned still has no tuning result in the store and still cannot be tuned on this machine. None when it is
        not; else the ``ships untuned`` lines a compile would say, for the caller to say once it answers."""
        from kbuild.device.probe import has_gpu

        declared = {k.name: k for _, k in self.kernels}
        lines = []
        for r in records:
            if r.get("state") != "baseline":
                continue
            k = declared.get(str(r.get("kernel")))
            target = str(r.get("target", ""))
            if k is None or not target.startswith("sm_") or not target[3:].isdigit():
                return None
            if self.store.get(str(r.get("key"))) is not None or self._can_tune(k, int(target[3:]), has_gpu):
                return None  # a tuning result arrived (prewarm), or this machine can tune it now
            arch = str(r.get("arch") or target)
            lines.append(f"kbuild-nvcc: {k.name} ({arch}) ships untuned: {self._why_untuned(k, arch)}")
        return lines

    @staticmethod
    def _usable(art: Any, data: bytes, cc: int, symbol: str) -> bool:
        """An accepted schedule for this cubin's target that still holds the kernel (a damaged or foreign entry is
        not shipped)."""
        from kbuild.sass.elf import Cubin

        if art.meta.get("kind") != KIND_TUNED or not art.meta.get("tuned"):
            return False
        try:
            other = Cubin(art.cubin, "stored cubin")
            return other.sm == cc and symbol in other.kernels() and len(art.cubin) == len(data)
        except KBuildError:
            return False

    def _tune(self, k: Any, data: bytes, symbol: str, key: str, components: dict[str, Any], argv: Sequence[str],
              *, env: Mapping[str, str], cwd: Path) -> Any:
        from kbuild import __version__
        from kbuild.cache import Artefact
        from kbuild.device.probe import local_gpus
        from kbuild.sass.elf import Cubin
        from kbuild.tune.measure.client import WorkerClient

        cc = Cubin(data, "cubin").sm
        variants = {point_label(p): ptxas_variant(argv, p, env=env, cwd=cwd) for p in k.points()[1:]}
        python_path = [str(self.settings.project_dir / p) for p in self.settings.python_path]
        backend = WorkerClient()
        try:
            out = tune_kernel(self.settings.tune_request(), cubin=data, symbol=symbol, bench=k.bench,
                              python_path=python_path, variants=variants, backend=backend)
        finally:
            backend.close()
        gpu = next((g.name for g in local_gpus() if g.cc == cc), None)
        meta = {"kind": KIND_TUNED, "key": key, "key_components": components, "kernel": k.name,
                "function": k.function, "symbol": symbol, "tuned": out.accepted, "speedup": out.speedup,
                "tune_decision": out.reason, "config": out.config, "baseline_cubin_sha256": components["cubin_sha256"],
                "tune_seconds": round(out.seconds, 3), "gpu_name": gpu, "backend": out.backend,
                "tune_report": json.loads(json.dumps(out.report, default=str)), "kbuild_version": __version__}
        art = Artefact.create(key=key, cubin=out.cubin, meta=meta)
        self.store.put(art)
        return art


def write_records(records: Sequence[Mapping[str, Any]], directory: Path | None) -> None:
    """One JSON file per record into ``directory`` (KBUILD_NVCC_RECORDS), named by kernel and target. A kernel's
    records of other targets (an earlier compile of its unit, in a build directory that is reused) are removed: the
    directory holds what the last compile of each unit shipped."""
    if directory is None or not records:
        return
    from kbuild.fsutil import write_atomic

    directory.mkdir(parents=True, exist_ok=True)
    names = {f"{r['kernel']}.{r['target']}.json" for r in records}
    for kernel in sorted({str(r["kernel"]) for r in records}):
        for old in directory.glob(f"{kernel}.*.json"):
            if old.name not in names and old.name.count(".") == 2:
                old.unlink(missing_ok=True)
    for r in records:
        write_atomic(directory / f"{r['kernel']}.{r['target']}.json", json.dumps(r, sort_keys=True, indent=1) + "\n")


__all__ = ["KIND_TUNED", "RECORD_FORMAT", "CudaTuning", "TuneOutcome", "demangle", "find_symbol", "matches",
           "point_label", "ptxas_variant", "tune_kernel", "tuned_key", "write_records"]
