"""The run time's one state: what is enabled, what kbuild put into Triton, what happened, what is cached.

Every loading path (:mod:`.hook`, :mod:`.loader`, :mod:`.direct`) and :mod:`.install` read and change the
process's one :class:`RuntimeState`, :data:`STATE`, under its lock; no other module of kbuild.runtime keeps
anything between calls, but for the caches the direct launcher and the autotuner answer keep on Triton's own
objects, which are valid for one :attr:`~RuntimeState.generation`.

* **Enabled**: each enabled package's loaded index, and the entries shipped per ``module:qualname``
  (:meth:`~RuntimeState.candidates`); ``generation`` counts the changes.
* **Installed**: the Triton hooks and methods kbuild replaced while it is enabled, to chain to and to restore.
* **What happened**: an :class:`Event` per decision (the last 1000, :func:`events`), logged once per kernel and
  decision (:meth:`~RuntimeState.record`); the once-per-kernel log of a call Triton compiles
  (:meth:`~RuntimeState.fallback`).
* **Coverage**: per kernel, each specialisation answered or compiled and each autotuning key answered or tuned,
  with the reasons (:class:`~kbuild.runtime.coverage.Coverage`, :func:`current_report`).
* **Caches**: the shipped cubins whose digest held (:meth:`~RuntimeState.verified_cubin`).

``KBUILD_RUNTIME`` (:func:`runtime_mode`, the settings' ``runtime`` field): off turns every path off; ``strict``
makes a call that would compile or autotune an error (:mod:`kbuild.runtime.coverage`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import asdict, dataclass
from typing import Any

from kbuild.errors import ConfigError
from kbuild.runtime.coverage import Coverage
from kbuild.runtime.index import Index, ShippedEntry
from kbuild.runtime.verify import REFUSED, Expected, Refused, cubin_mismatch, read_cubin
from kbuild.settings.variables import env_setting

log = logging.getLogger("kbuild.runtime")

#: Environment variable that turns the run-time substitution off (``off``, ``0``, ``false``, ``no``): the
#: settings' ``runtime`` field (:mod:`kbuild.settings.model`).
RUNTIME_ENV = "KBUILD_RUNTIME"

_MAX_EVENTS = 1000


@dataclass(frozen=True)
class Event:
    """One decision of the run time about one kernel."""

    function: str
    substituted: bool
    reason: str
    key: str | None = None
    package: str | None = None
    kernel: str | None = None
    target: str | None = None
    tuned: bool | None = None
    speedup: float | None = None
    cubin_sha256: str | None = None
    stage: str | None = None
    """``"zero-jit"`` (loaded without compiling), ``"autotune"`` (the autotuner answered), ``"post-compile"``,
    ``"direct-launch"``."""

    @classmethod
    def of_entry(cls, function: str, shipped: ShippedEntry, *, substituted: bool, reason: str,
                 stage: str | None = None) -> Event:
        """A decision about one shipped entry: its key, package, kernel, target and tuned flag; a substitution
        also names the cubin, its speedup and the ``stage`` that made it."""
        index, key, entry = shipped.index, shipped.key, shipped.entry
        outcome: dict[str, Any] = {}
        if substituted:
            outcome = {"speedup": entry.get("speedup"), "cubin_sha256": entry["cubin_sha256"], "stage": stage}
        return cls(function, substituted, reason, key=key, package=index.package, kernel=entry.get("kernel"),
                   target=entry["target"].get("arch"), tuned=bool(entry.get("tuned")), **outcome)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RuntimeState:
    """Everything the run time keeps in a process (see the module docstring); :data:`STATE` is the one."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # enabled
        self.indexes: dict[str, Index] = {}
        self.by_function: dict[str, list[ShippedEntry]] = {}
        self.generation = 0
        """Bumped whenever the enabled indexes change (autotuners are answered again, the direct launcher's
        per-function caches start afresh)."""
        # installed: kbuild's hooks, and what they replaced
        self.post_compile_installed = False
        self.post_compile_hook: Any = None
        """kbuild's ``jit_post_compile_hook`` (:mod:`.hook`, set when it is imported): what the direct path compares
        Triton's hook with, without importing the module that installs it."""
        self.previous_post_compile_hook: Any = None
        self.loader_installed = False
        self.cache_hook: Any = None
        """kbuild's ``jit_cache_hook`` (:mod:`.loader`, set when it is imported)."""
        self.previous_cache_hook: Any = None
        self.original_autotuner_run: Any = None
        self.direct_installed = False
        self.original_jit_run: Any = None
        self.answered_tuners: weakref.WeakSet[Any] = weakref.WeakSet()
        """Autotuners kbuild answered whose ``run`` is Triton's own again (the instance's attribute), until the
        enabled indexes change."""
        # what happened
        self.events: list[Event] = []
        self.logged: set[tuple[str, str]] = set()
        self.fallbacks_logged: set[str] = set()
        self.direct_declined_logged: set[str] = set()
        self.coverage = Coverage()
        # caches
        self.cubins: dict[tuple[str, str], bytes] = {}

    # -- enabled

    def enable_index(self, package: str, index: Index) -> None:
        with self.lock:
            self.indexes[package] = index
            self._rebuild()

    def disable_index(self, package: str | None) -> None:
        """Forget ``package``'s index (every package's when None)."""
        with self.lock:
            if package is None:
                self.indexes.clear()
            else:
                self.indexes.pop(package, None)
            self._rebuild()

    def _rebuild(self) -> None:
        by_function: dict[str, list[ShippedEntry]] = {}
        for index in self.indexes.values():
            for function, shipped in index.by_function().items():
                by_function.setdefault(function, []).extend(shipped)
        self.by_function = by_function
        self.generation += 1
        for tuner in list(self.answered_tuners):  # answered again, from the new set of indexes, on their next call
            tuner.__dict__.pop("run", None)
        self.answered_tuners.clear()

    def candidates(self, function: str, field: str | None = None) -> list[ShippedEntry]:
        """The entries the enabled packages ship for ``function`` (``module:qualname``), those that have ``field``
        when given (``"triton_metadata"``: zero-JIT loading; ``"autotune"``: an autotuner's answer)."""
        with self.lock:
            found = self.by_function.get(function, ())
            return [c for c in found if field in c.entry] if field is not None else list(found)

    # -- what happened

    def record(self, event: Event) -> None:
        """Keep ``event``, and log it once per kernel and decision: a substitution and a plain refusal at debug
        level, a refused cubin (:data:`~kbuild.runtime.verify.REFUSED`) as a warning."""
        with self.lock:
            self.events.append(event)
            del self.events[:-_MAX_EVENTS]
            once = (event.function, f"{event.key}:{event.substituted}:{event.reason}")
            if once in self.logged:
                return
            self.logged.add(once)
        if event.substituted:
            speed = f" ×{event.speedup:.3f}" if event.speedup is not None else ""
            log.debug("substituted %s cubin for %s [%s] from %s (kernel %s, key %s, sha256 %s, %s)%s",
                      "tuned" if event.tuned else "shipped", event.function, event.target, event.package, event.kernel,
                      (event.key or "")[:16], (event.cubin_sha256 or "")[:16], event.stage or "?", speed)
        elif event.reason.startswith(REFUSED):
            log.warning("%s: %s; Triton's own cubin is used", event.function, event.reason)
        else:
            log.debug("%s: no substitution: %s", event.function, event.reason)

    def fallback(self, function: str, reason: str) -> None:
        """Log once per kernel that Triton's own path runs for it, and why (the first reason): at info level, and
        as a warning for a refused cubin (:data:`~kbuild.runtime.verify.REFUSED`: the package data is damaged or
        was edited)."""
        with self.lock:
            if function in self.fallbacks_logged:
                return
            self.fallbacks_logged.add(function)
        level = logging.WARNING if reason.startswith(REFUSED) else logging.INFO
        log.log(level, "%s: no shipped cubin for this call (%s); Triton compiles it", function, reason)

    def package_of(self, function: str) -> str | None:
        """The enabled package that ships entries for ``function`` (``module:qualname``), else the enabled package
        its module belongs to, else None."""
        with self.lock:
            found = self.by_function.get(function)
            if found:
                return found[0].index.package
            module = function.partition(":")[0]
            return next((p for p in sorted(self.indexes) if module == p or module.startswith(p + ".")), None)

    def reset_events(self) -> None:
        """Forget the events, what was logged once (the next decisions are logged again) and the coverage."""
        with self.lock:
            self.events.clear()
            self.logged.clear()
            self.fallbacks_logged.clear()
            self.direct_declined_logged.clear()
        self.coverage.clear()

    # -- caches

    def verified_cubin(self, shipped: ShippedEntry, *, call: Expected | None = None) -> bytes:
        """The cubin of ``shipped``, checked (:mod:`kbuild.runtime.verify`): no other key of its index names it, it
        is read within its recorded size with its sha256, and its ELF agrees with the entry and with ``call``.
        :class:`~kbuild.runtime.verify.Refused` says why not. The bytes are kept once their digest held."""
        index, key, entry = shipped.index, shipped.key, shipped.entry
        conflict = index.conflicts.get(key)
        if conflict is not None:
            raise Refused(conflict)
        cache_key = (str(index.data_dir), str(entry["cubin_sha256"]))
        with self.lock:
            data = self.cubins.get(cache_key)
        if data is None:
            data = read_cubin(index.data_dir, entry)
            with self.lock:
                self.cubins[cache_key] = data
        problem = cubin_mismatch(data, entry, where=str(index.data_dir / str(entry["cubin"])), call=call)
        if problem is not None:
            raise Refused(problem)
        return data


#: The process's run-time state.
STATE = RuntimeState()


def runtime_mode() -> bool | str:
    """``KBUILD_RUNTIME``: True (on), False (off) or ``"strict"``. A bad value (neither a boolean nor ``strict``)
    is off, with a warning once: Triton's own cubins are always correct, and the hook never fails a package's
    import."""
    try:
        mode: bool | str = env_setting("runtime")
        return mode
    except ConfigError as exc:
        with STATE.lock:
            once = (RUNTIME_ENV, str(exc))
            if once not in STATE.logged:
                STATE.logged.add(once)
                log.warning("%s; tuned cubins are not substituted", exc)
        return False


def runtime_disabled() -> bool:
    """Whether ``KBUILD_RUNTIME`` turns the substitution off (:func:`runtime_mode`)."""
    return runtime_mode() is False


def strict() -> bool:
    """Whether ``KBUILD_RUNTIME=strict``: a call that would compile or autotune raises
    :class:`~kbuild.runtime.coverage.CoverageError`."""
    return runtime_mode() == "strict"


def current_report() -> dict[str, Any]:
    """The coverage report so far (:mod:`kbuild.runtime.coverage`)."""
    mode = runtime_mode()
    with STATE.lock:
        packages = {p: {"index": str(i.data_dir / "index.json"), "entries": len(i.entries)}
                    for p, i in STATE.indexes.items()}
    return STATE.coverage.report(mode="strict" if mode == "strict" else "on" if mode else "off", packages=packages)


def events() -> list[Event]:
    """The run time's decisions so far (at most the last 1000), oldest first."""
    with STATE.lock:
        return list(STATE.events)


def substitutions() -> list[Event]:
    """The kernels whose cubin was replaced by a shipped one."""
    return [e for e in events() if e.substituted]


def reset_events() -> None:
    """Forget the decisions so far and what was logged once."""
    STATE.reset_events()


def function_name(jit: Any) -> str:
    """``module:qualname`` of a ``JITFunction``'s Python function: how an index names the function of an entry."""
    return f"{jit.fn.__module__}:{jit.fn.__qualname__}"


__all__ = ["RUNTIME_ENV", "STATE", "Event", "RuntimeState", "current_report", "events", "function_name",
           "reset_events", "runtime_disabled", "runtime_mode", "strict", "substitutions"]
