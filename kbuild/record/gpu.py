"""``--mode gpu``: a workload on a GPU, recorded through Triton's own hooks while it runs as it would.

Read from Triton 3.6's source (``triton/runtime/jit.py``, ``autotuner.py``, ``knobs.py``,
``compiler/compiler.py``, the NVIDIA launcher in ``backends/nvidia/driver.py``):

* **Specialisations**: ``knobs.runtime.jit_post_compile_hook`` is called by ``JITFunction._do_compile`` once per
  specialisation and process, after ``triton.compile`` (a fresh compile or a hit in Triton's disk cache) put the
  kernel into the function's ``kernel_cache``, with the ``compile`` mapping (signature, constants, attributes,
  options) that :func:`kbuild.runtime.keys.specialization_from_hook` maps onto the declaration notation: the
  same function the run time keys a call with. A hook installed before is kept and called after this one.
* **Calls**: the compiled launcher calls ``knobs.runtime.launch_enter_hook`` (a ``HookChain``; this module adds
  itself to it) with ``CompiledKernel.launch_metadata(grid, stream, *args)``, a lazy dict that evaluates the
  ``JITFunction``'s ``launch_metadata`` function (Triton's profiling seam, as proton uses it) with the grid, the
  compiled kernel's metadata (whose ``hash`` names the specialisation) and every argument by name. The hook sets
  that function on each function it saw compiled (wrapping one the package set), so each launch is counted and
  sampled with its real grid, without a second specialisation of the arguments.
* **Layers**: ``Autotuner.run``, ``Autotuner._bench`` and ``Heuristics.run`` are wrapped (class attributes) to
  see which autotuner and heuristics a call went through, which config a launch benchmarks (launches inside
  ``_bench`` are the autotuner's, not the workload's, and are not counted: their number depends on timing), and,
  after ``Autotuner.run``, the config Triton chose (``self.cache[key]``): ``"measured"`` when it benchmarked,
  ``"triton-cache"`` when its disk cache answered (``cache_results``). Each wrapper calls Triton's method
  unchanged.

The SM count of each sample is the device's (``driver.active.utils.get_device_properties(device)
["multiprocessor_count"]``). Nothing else changes: kernels compile, autotune and launch as they would (each launch
runs the hook chain, as with any profiler). With :mod:`kbuild.runtime` enabled in the recorded process, its direct
launcher defers to Triton's whenever a launch hook is set, so shipped kernels are recorded too (the zero-JIT
loader's kernels are counted only when Triton's ``launch_metadata`` reaches them: a kernel rebuilt from package data
carries no ``ASTSource``, and its calls are not sampled).
"""

from __future__ import annotations

from typing import Any

from kbuild.record.recorder import Frame, Recorder, autotune_key, config_index, json_value


class GpuMode:
    """Installs the hooks and wrappers; :meth:`uninstall` removes them."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.previous: Any = None
        self._saved: list[tuple[Any, str, Any]] = []
        self._installed = False

    def install(self) -> None:
        from triton import knobs
        from triton.runtime.autotuner import Autotuner, Heuristics

        mode = self
        run, bench, heuristics_run = Autotuner.run, Autotuner._bench, Heuristics.run

        def autotuner_run(autotuner: Any, *args: Any, **kwargs: Any) -> Any:
            return mode.autotune(run, autotuner, args, kwargs)

        def autotuner_bench(autotuner: Any, *args: Any, config: Any, **meta: Any) -> Any:
            frame = mode.recorder.frames.autotuner()
            if frame is None or frame.layer is not autotuner:
                return bench(autotuner, *args, config=config, **meta)
            saved = frame.config, frame.benchmarking
            frame.config, frame.benchmarking = config_index(autotuner, config), True
            if frame.config is not None and frame.config not in frame.benchmarked:
                frame.benchmarked.append(frame.config)
            try:
                return bench(autotuner, *args, config=config, **meta)
            finally:
                frame.config, frame.benchmarking = saved

        def observed_heuristics_run(layer: Any, *args: Any, **kwargs: Any) -> Any:
            stack = mode.recorder.frames.stack
            stack.append(Frame(layer, "heuristics"))
            try:
                return heuristics_run(layer, *args, **kwargs)
            finally:
                stack.pop()

        for cls, name, fn in ((Autotuner, "run", autotuner_run), (Autotuner, "_bench", autotuner_bench),
                              (Heuristics, "run", observed_heuristics_run)):
            self._saved.append((cls, name, cls.__dict__[name]))
            setattr(cls, name, fn)
        self.previous = knobs.runtime.jit_post_compile_hook
        knobs.runtime.jit_post_compile_hook = self.post_compile
        chain = knobs.runtime.launch_enter_hook
        if hasattr(chain, "add"):
            chain.add(self.launch_enter)
        else:  # a single hook someone set: keep it, after this one
            knobs.runtime.launch_enter_hook = _Both(self.launch_enter, chain)
        self._installed = True

    def uninstall(self) -> None:
        if not self._installed:
            return
        from triton import knobs

        for cls, name, fn in reversed(self._saved):
            setattr(cls, name, fn)
        self._saved.clear()
        if knobs.runtime.jit_post_compile_hook is self.post_compile:
            knobs.runtime.jit_post_compile_hook = self.previous
        chain = knobs.runtime.launch_enter_hook
        if hasattr(chain, "remove"):
            chain.remove(self.launch_enter)
        elif isinstance(chain, _Both):
            knobs.runtime.launch_enter_hook = chain.second
        self._installed = False

    # -- specialisations ------------------------------------------------------------------------------

    def post_compile(self, *, key: Any, repr: Any, fn: Any, compile: Any, is_manual_warmup: bool,
                     already_compiled: bool) -> Any:
        try:
            self.compiled(key, fn.jit_function, compile)
        except Exception as exc:  # never break the workload
            self.recorder.note(f"{getattr(fn, 'module', '?')}:{getattr(fn, 'name', '?')}: a specialisation could "
                               f"not be recorded ({type(exc).__name__}: {exc})")
        if self.previous is not None:
            return self.previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                                 already_compiled=already_compiled)
        return None

    def compiled(self, key: Any, jit: Any, compile_info: Any) -> None:
        from kbuild.runtime.keys import specialization_from_hook

        device = compile_info["device"]
        kernel_cache, _, target, _, _ = jit.device_caches[device]
        cc = int(target.arch)
        state = self.recorder.specialization(jit, specialization_from_hook(jit, compile_info, cc=cc))
        kernel = kernel_cache.get(key)
        digest = getattr(getattr(kernel, "metadata", None), "hash", None) or getattr(kernel, "hash", None)
        if digest is not None:
            self.recorder.memo[("hash", digest)] = state
            self.recorder.sm_counts[("hash", digest)] = self.sm_count(device)
        self.watch(jit)

    def sm_count(self, device: Any) -> int:
        counts = self.recorder.sm_counts
        if device not in counts:
            from triton.runtime.driver import driver

            counts[device] = int(driver.active.utils.get_device_properties(device)["multiprocessor_count"])
        return counts[device]

    # -- calls ----------------------------------------------------------------------------------------

    def watch(self, jit: Any) -> None:
        """Give ``jit`` the ``launch_metadata`` function that records each launch (once; a package's own is kept)."""
        current = jit.launch_metadata
        if getattr(current, "kbuild_record", False):
            return
        mode = self

        def launch_metadata(grid: Any, metadata: Any, args: Any) -> Any:
            out = current(grid, metadata, args) if current is not None else {}
            try:
                mode.launched(grid, metadata, args)
            except Exception as exc:
                mode.recorder.note(f"a launch could not be recorded ({type(exc).__name__}: {exc})")
            return out

        launch_metadata.kbuild_record = True  # type: ignore[attr-defined]
        jit.launch_metadata = launch_metadata

    def launch_enter(self, metadata: Any) -> None:
        """``launch_enter_hook``: evaluate the lazy metadata, which runs :meth:`launched` for a watched kernel."""
        if hasattr(metadata, "extras") and callable(getattr(metadata, "get", None)):
            metadata.get()

    def launched(self, grid: Any, metadata: Any, args: Any) -> None:
        if self.recorder.frames.benchmarking():
            return
        digest = getattr(metadata, "hash", None)
        state = self.recorder.memo.get(("hash", digest))
        if state is None:
            return
        state.call(args, grid, self.recorder.sm_counts.get(("hash", digest), 1))

    # -- autotuning -----------------------------------------------------------------------------------

    def autotune(self, run: Any, autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key = autotune_key(autotuner, args, kwargs)
        known = key is None or key in autotuner.cache
        frame = Frame(autotuner, "autotune", key=key)
        stack = self.recorder.frames.stack
        stack.append(frame)
        try:
            return run(autotuner, *args, **kwargs)
        finally:
            stack.pop()
            if not known and key in autotuner.cache:
                try:
                    self._tuned(autotuner, key, frame)
                except Exception as exc:
                    self.recorder.note(f"an autotuner's choice could not be recorded ({type(exc).__name__}: {exc})")
                # written now, not at the next launch: a process may end here without exiting (an xdist worker
                # killed by a timeout), and the choice of its last call would be lost
                self.recorder.tick()

    def _tuned(self, autotuner: Any, key: Any, frame: Frame) -> None:
        from triton.runtime.driver import driver
        from triton.runtime.jit import JITFunction

        from kbuild.targets import Target

        jit = autotuner.fn
        while not isinstance(jit, JITFunction):
            jit = jit.fn
        device = driver.active.get_current_device()
        cc = int(driver.active.get_current_target().arch)
        self.recorder.tuning(jit, autotuner, {
            "target": Target(cc).name, "key": json_value(list(key)), "configs": sorted(frame.benchmarked),
            "choice": config_index(autotuner, autotuner.cache[key]),
            "source": "measured" if frame.benchmarked else "triton-cache", "sm_count": self.sm_count(device)})


class _Both:
    """Two launch hooks as one, when the slot held a single function instead of Triton's ``HookChain``."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def __call__(self, metadata: Any) -> None:
        self.first(metadata)
        if self.second is not None:
            self.second(metadata)


__all__ = ["GpuMode"]
