"""The nvcc launcher: nvcc's own plan executed step by step, ``cicc`` and ``ptxas`` answered from the store.

``kbuild-nvcc NVCC ARGS...`` (``CMAKE_CUDA_COMPILER_LAUNCHER=kbuild-nvcc``, or torch's
``PYTORCH_NVCC="kbuild-nvcc nvcc"``):

1. with a flag the launcher cannot honour (:data:`kbuild.nvcc.plan.CONFLICTING_FLAGS`), or when nvcc's plan
   has no device compile (a link, ``--version``, a host-only file), or cannot be read, or holds anything the
   shell nvcc runs it through would expand (:mod:`kbuild.nvcc.shell`), it runs plain ``NVCC ARGS`` — with one
   warning naming why (once per build directory and reason, :meth:`Launcher.plain`), except for invocations
   that compile no CUDA at all;
2. otherwise it runs ``NVCC ARGS --dryrun --keep --keep-dir TMP`` (without ``--threads N``) and, unless the
   direct mode answers the whole compile (:mod:`kbuild.nvcc.direct`, keyed by that plan), executes the plan's
   commands in the caller's directory, with nvcc's variables set: in order, or with ``--threads N`` up to N at
   a time where they are independent (:mod:`kbuild.nvcc.schedule`). Each ``cicc``, ``ptxas`` and ``cudafe++``
   command is looked up in the store first (:mod:`kbuild.nvcc.steps` says what the key covers); a hit writes
   the stored outputs (and replays the tool's messages) instead of running the tool, a miss runs it and stores
   its outputs. Two builds from empty stores write the same object: a module id that ``cudafe++`` makes from
   its process id is replaced by one made from the unit (:mod:`kbuild.nvcc.module_id`), and the host compile
   maps the temporary directory to :data:`STABLE_TMP` in ``-g`` debug information (``-fdebug-prefix-map``, gcc
   and clang drivers only).

The store is the one the settings model names (``KBUILD_STORE``, default ``~/.cache/kbuild``); a store that
cannot be opened or written is a warning and the steps run uncached. ``KBUILD_NVCC_LOG`` names a file that
gets one JSON line per executed or answered step (``tool``, ``arch``, ``action`` = ``run``/``hit``/
``stored``/``uncached``, ``seconds``): the evidence that a second build runs no cicc and no ptxas.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from kbuild.canonical import canonical_json
from kbuild.errors import KBuildError, MissingDependencyError, StoreError

from . import direct, module_id, schedule
from .deps import format_nvcc_deps, parse_make_deps, union
from .plan import (
    DEPS_STEP,
    Plan,
    Unsupported,
    child_env,
    conflicting_flag,
    dependency_target,
    dryrun,
    is_host_compile,
    is_preprocess,
    split_threads,
    which,
)
from .steps import (
    TMP_PLACEHOLDER,
    NotCacheable,
    Step,
    cicc_step,
    cudafe_step,
    module_id_placeholder,
    ptxas_step,
)

log = logging.getLogger(__name__)

#: Record kinds in artefact metadata.
KIND_STEP = "nvcc-step"
KIND_POINTER = "nvcc-step-pointer"
KIND_OUTPUT = "nvcc-step-output"
KIND_TOOL = "nvcc-tool-digest"
KIND_MANIFEST = "nvcc-direct-manifest"
KIND_WARNED = "nvcc-warned"

#: What the host compile's debug information names instead of the launcher's temporary directory.
STABLE_TMP = "/tmp/kbuild-nvcc"
#: A fallback warning is printed once per build directory and reason in each window of this many seconds.
WARN_WINDOW_S = 600

#: Outputs whose text may name kbuild's temporary directory (written as :data:`TMP_PLACEHOLDER` in the store).
#: A binary output (a cubin) naming it is not stored.
_TEXT_ROLES = {"ptx", "gen_c", "stub", "gen_device", "module_id"}

#: The steps answered from the store, by the executable's name.
_STEPS = {"cicc": cicc_step, "ptxas": ptxas_step, "cudafe++": cudafe_step}
#: Commands that may run beside others under ``--threads`` (with the preprocessing steps; :mod:`.schedule`).
_OVERLAPPING = {"cicc", "ptxas", "cudafe++"}


class Launcher:
    """One nvcc invocation. ``store`` is an open :class:`kbuild.cache.Store`, or None to run uncached."""

    def __init__(self, nvcc: str, args: Sequence[str], *, cwd: Path, environ: Mapping[str, str],
                 store: Any | None, log_path: Path | None = None) -> None:
        self.nvcc = nvcc
        self.args = list(args)
        self.cwd = cwd
        self.environ = dict(environ)
        self.store = store
        self.log_path = log_path
        self.events: list[dict[str, Any]] = []
        self._identity_cache: dict[str, Any] | None = None
        self._t0 = time.perf_counter()
        self._lock = threading.RLock()  # the store, the step log, stderr and tuning, when steps run in parallel
        self.tuning: Any | None = None  # kbuild.nvcc.tuned.CudaTuning: the declared kernels of this unit

    # --- entry --------------------------------------------------------------------------------------------------
    def run(self) -> int:
        """Compile; the exit status is nvcc's (or the failing step's)."""
        t0 = time.perf_counter()
        reason = conflicting_flag(self.args)
        if reason is not None:
            return self.plain(f"the argument {reason}")
        jobs, args = split_threads(self.args)
        if self.store is not None:
            from .tuned import CudaTuning

            self.tuning = CudaTuning.for_invocation(self.args, self.cwd, store=self.store, emit=self._event)
        with tempfile.TemporaryDirectory(prefix="kbuild-nvcc-") as tmp:
            keep = Path(tmp)
            try:
                plan = dryrun(self.nvcc, args, keep, cwd=self.cwd, env=self.environ)
            except Unsupported as exc:
                quiet = "compiles no device code" in str(exc) or "exited with status" in str(exc)
                return self.plain(str(exc), warn=not quiet)
            invocation = None
            if self.store is not None and direct.eligible(args):
                try:
                    invocation = direct.invocation_key(self._tool_digest(self.nvcc), plan, args, self.cwd,
                                                       self.environ, nvcc=self.nvcc)
                except direct.NotKeyable as exc:
                    self._event("nvcc", "", "direct-uncached", 0.0, reason=str(exc))
                if invocation is not None and self.tuning is not None:
                    # a tuned cubin stored later must not be hidden by an earlier object
                    invocation = hashlib.sha256(f"{invocation}:{self.tuning.digest()}".encode()).hexdigest()
                if invocation is not None and self._direct_restore(invocation):
                    self._event("nvcc", "", "total", time.perf_counter() - t0, status=0, direct=True)
                    return 0
            rc = self.execute(plan, invocation, jobs=jobs)
            self._event("nvcc", "", "total", time.perf_counter() - t0, status=rc, direct=False, jobs=jobs)
            return rc

    def plain(self, why: str, *, warn: bool = True) -> int:
        """Run plain nvcc with the caller's arguments, saying why in one line (never silently for a CUDA compile;
        once per build directory and reason while the store remembers it, :meth:`_said`)."""
        if warn and not self._said(why):
            print(f"kbuild-nvcc: warning: running plain nvcc, uncached: {why}", file=sys.stderr)
        self._event("nvcc", "", "plain", 0.0, reason=why)
        try:
            return subprocess.run([self.nvcc, *self.args], cwd=self.cwd, env=self.environ, check=False).returncode
        except OSError as exc:
            raise MissingDependencyError(f"kbuild-nvcc: cannot run nvcc {self.nvcc!r}: {exc}") from None

    def _said(self, why: str) -> bool:
        """Whether this warning was already printed for this build directory in the current window of
        :data:`WARN_WINDOW_S` seconds (a ninja build of many units says it once); records it when not."""
        if self.store is None:
            return False
        window = int(time.time() // WARN_WINDOW_S)
        key = hashlib.sha256(canonical_json({"kind": KIND_WARNED, "cwd": str(self.cwd), "why": why,
                                             "window": window})).hexdigest()
        if self._get(key) is not None:
            return True
        self._put(_artefact(key, b"", {"kind": KIND_WARNED}))
        return False

    # --- the plan -----------------------------------------------------------------------------------------------
    def execute(self, plan: Plan, invocation: str | None = None, *, jobs: int = 1) -> int:
        """Run ``plan``, at most ``jobs`` commands at once (:mod:`kbuild.nvcc.schedule`); with ``invocation`` (the
        direct mode's key), store the object for a direct answer."""
        env = child_env(plan, self.environ)
        tmp = str(plan.keep_dir)
        try:  # every command resolved before any runs: what cannot be resolved runs plain nvcc instead
            deps_target = dependency_target(self.args) if any(c.argv[0] == DEPS_STEP for c in plan.commands) else None
            argvs: list[tuple[str, ...]] = []
            for i, c in enumerate(plan.commands):
                if c.argv[0] == DEPS_STEP:
                    argvs.append(c.argv)
                elif is_preprocess(c.argv):  # its dependency list as a side effect: what this unit reads
                    argvs.append((which(c.argv[0], env, self.cwd), *c.argv[1:], "-MD", "-MF", f"{tmp}/kbuild-deps-{i}.d"))
                elif is_host_compile(c.argv):  # -g names the host file by its path in the random keep dir
                    argvs.append((which(c.argv[0], env, self.cwd), f"-fdebug-prefix-map={tmp}={STABLE_TMP}",
                                  *c.argv[1:]))
                else:
                    argvs.append((which(c.argv[0], env, self.cwd), *c.argv[1:]))
        except Unsupported as exc:
            return self.plain(str(exc))
        run = _PlanRun(self, plan, argvs, env, tmp, deps_target, capture_all=jobs > 1)
        overlaps = [c.tool in _OVERLAPPING or is_preprocess(c.argv) for c in plan.commands]
        rc = schedule.run(schedule.dependencies(argvs, overlaps, plan.keep_dir, self.cwd), run.command, jobs)
        if rc != 0:
            return rc
        if self.tuning is not None:  # a unit that shipped untuned is answered directly only while nothing could
            self._write_records(self.tuning.records)  # tune it (CudaTuning.answers, checked before a direct answer)
        if invocation is not None and run.read_known:
            read = union(run.read[i] for i in sorted(run.read))
            self._direct_save(invocation, read, [a[0] for a in argvs if a[0] != DEPS_STEP], run.deps_file)
        return 0

    def _tuned(self, tool: str, step: Step, argv: Sequence[str], env: Mapping[str, str]) -> None:
        """After a ptxas step: the declared kernels' tuned cubins replace ptxas's (:mod:`kbuild.nvcc.tuned`)."""
        if tool == "ptxas" and self.tuning is not None and self.store is not None:
            with self._lock:
                self.tuning.after_ptxas(step.outputs["cubin"], argv, env=env, cwd=self.cwd)

    def _write_records(self, records: list[dict[str, Any]]) -> None:
        from kbuild.settings.variables import env_setting

        from .tuned import write_records

        write_records(records, env_setting("nvcc_records"))

    # --- the direct mode ----------------------------------------------------------------------------------------
    def _output_path(self) -> Path:
        for i, a in enumerate(self.args):
            if a in ("-o", "--output-file") and i + 1 < len(self.args):
                return self.cwd / self.args[i + 1]
            if a.startswith(("-o=", "--output-file=")):
                return self.cwd / a.split("=", 1)[1]
        raise AssertionError("direct.eligible() checked -o")

    def _direct_restore(self, invocation: str) -> bool:
        t0 = time.perf_counter()
        for slot in range(direct.SLOTS):
            manifest = self._get(direct.slot_key(invocation, slot))
            if manifest is None:
                return False
            meta = manifest.meta
            if meta.get("kind") != KIND_MANIFEST or meta.get("cwd") not in (None, str(self.cwd)) \
                    or not direct.current_digests(meta["files"], self.cwd):
                continue
            try:
                tools_now = {p: self._tool_digest(p) for p in meta["tools"]}
            except OSError:
                continue
            if tools_now != meta["tools"]:
                continue
            untuned: list[str] = []
            if meta.get("cuda_records"):
                said = None if self.tuning is None else self.tuning.answers(meta["cuda_records"])
                if said is None:
                    continue  # a kernel that shipped untuned would now ship tuned: compile again
                untuned = said
            obj = self._get(meta["object"])
            deps = self._get(meta["deps"]) if meta.get("deps") else None
            if obj is None or (meta.get("deps") and deps is None):
                return False
            out = self._output_path()
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(obj.cubin)
            if deps is not None:
                deps_path = self.cwd / meta["deps_path"]
                deps_path.parent.mkdir(parents=True, exist_ok=True)
                deps_path.write_bytes(deps.cubin)
            if meta.get("cuda_records"):
                self._write_records(meta["cuda_records"])
            for line in untuned:  # as the compile that stored the object said them
                print(line, file=sys.stderr)
            self._event("nvcc", "", "direct-hit", time.perf_counter() - t0, key=invocation)
            return True
        return False

    def _direct_save(self, invocation: str, files: list[str], tools: list[str],
                     deps_file: tuple[Path, str] | None) -> None:
        profile = Path(self.nvcc).resolve().parent / "nvcc.profile"
        digests = direct.file_digests([*files, *([str(profile)] if profile.is_file() else [])], self.cwd)
        if digests is None:
            self._event("nvcc", "", "direct-uncached", 0.0, reason="a file is unreadable or uses a clock macro")
            return
        try:
            tool_digests = {t: self._tool_digest(t) for t in dict.fromkeys([self.nvcc, *tools])}
            obj = self._output_path().read_bytes()
        except OSError:
            return
        here = str(self.cwd).encode()
        names_cwd = here in obj or (deps_file is not None and here in deps_file[1].encode())
        result = direct.result_key(invocation, digests, tool_digests)
        if names_cwd:  # the object (or its dependency file) depends on the directory too
            result = hashlib.sha256(f"{result}:{self.cwd}".encode()).hexdigest()
        obj_key = hashlib.sha256(f"{result}:object".encode()).hexdigest()
        self._put(_artefact(obj_key, obj, {"kind": KIND_OUTPUT, "tool": "nvcc", "role": "object"}))
        meta: dict[str, Any] = {"kind": KIND_MANIFEST, "files": digests, "tools": tool_digests, "object": obj_key,
                                "deps": None, "cwd": str(self.cwd) if names_cwd else None}
        if self.tuning is not None and self.tuning.records:
            meta["cuda_records"] = self.tuning.records
        if deps_file is not None:
            deps_key = hashlib.sha256(f"{result}:deps".encode()).hexdigest()
            self._put(_artefact(deps_key, deps_file[1].encode(), {"kind": KIND_OUTPUT, "tool": "nvcc", "role": "deps"}))
            meta["deps"] = deps_key
            meta["deps_path"] = os.path.relpath(deps_file[0], self.cwd)
        for slot in range(direct.SLOTS):  # the first free slot (entries are immutable)
            key = direct.slot_key(invocation, slot)
            if self._get(key) is None:
                self._put(_artefact(key, b"", meta))
                self._event("nvcc", "", "direct-stored", 0.0, key=invocation, slot=slot)
                return

    def _run(self, argv: Sequence[str], env: Mapping[str, str], *, capture: bool,
             echo: bool = True) -> tuple[int, str, int]:
        """Run one command: its exit status, its messages when captured (to be replayed on a hit; passed on unless
        ``echo`` is off, whole, so that parallel steps do not interleave) and its process id."""
        try:
            proc = subprocess.Popen(list(argv), cwd=self.cwd, env=dict(env),
                                    stdout=subprocess.PIPE if capture else None,
                                    stderr=subprocess.STDOUT if capture else None)
        except OSError as exc:
            raise MissingDependencyError(f"kbuild-nvcc: cannot run {argv[0]!r}: {exc}") from None
        raw, _ = proc.communicate()
        output = raw.decode(errors="replace") if raw else ""
        if output and echo:
            with self._lock:
                sys.stderr.write(output)
                sys.stderr.flush()
        return proc.returncode, output, proc.pid

    # --- the store ----------------------------------------------------------------------------------------------
    def _get(self, key: str) -> Any | None:
        with self._lock:
            try:
                return self.store.get(key) if self.store is not None else None
            except StoreError as exc:
                self._store_failed(exc)
                return None

    def _put(self, art: Any) -> None:
        with self._lock:
            try:
                if self.store is not None:
                    self.store.put(art)
            except (StoreError, OSError) as exc:
                self._store_failed(exc)

    def _store_failed(self, exc: Exception) -> None:
        if self.store is not None:
            print(f"kbuild-nvcc: warning: the artefact store failed, steps run uncached: {exc}", file=sys.stderr)
        self.store = None

    def _restore(self, step: Step, tmp: str) -> bool:
        """Write a stored step's outputs; False on a miss (or an incomplete entry: the step then runs)."""
        t0 = time.perf_counter()
        head = self._get(step.key)
        relocate = step.relocate
        if head is not None and head.meta.get("kind") == KIND_POINTER:
            module_id = step.volatile.get("module_id")
            moved = self._get(step.relocated_key(module_id)) if module_id else None
            if moved is not None and moved.meta.get("relocated"):
                head, relocate = moved, module_id
            else:
                head = self._get(step.volatile_key())
        if head is None or head.meta.get("kind") != KIND_STEP:
            return False
        outputs = head.meta.get("outputs", {})
        if set(outputs) != set(step.outputs):
            return False
        blobs: dict[str, bytes] = {}
        for role, sub in outputs.items():
            art = self._get(sub)
            if art is None or art.meta.get("kind") != KIND_OUTPUT:
                return False
            data = art.cubin
            if role in _TEXT_ROLES:
                data = data.replace(TMP_PLACEHOLDER.encode(), tmp.encode())
            if relocate:
                data = data.replace(module_id_placeholder(relocate).encode(), relocate.encode())
            blobs[role] = data
        for role, data in blobs.items():
            path = step.outputs[role]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if head.meta.get("output"):
            sys.stderr.write(head.meta["output"].replace(TMP_PLACEHOLDER, tmp))
        self._event(step.tool, step.arch, "hit", time.perf_counter() - t0, key=step.key)
        return True

    def _save(self, step: Step, tmp: str, output: str, seconds: float, **extra: Any) -> None:
        blobs: dict[str, bytes] = {}
        for role, path in step.outputs.items():
            try:
                data = path.read_bytes()
            except OSError:
                self._event(step.tool, step.arch, "uncached", seconds, reason=f"{role} output {path} missing")
                return
            if tmp.encode() in data:
                if role not in _TEXT_ROLES:
                    self._event(step.tool, step.arch, "uncached", seconds, reason=f"{role} names the temporary dir")
                    return
                data = data.replace(tmp.encode(), TMP_PLACEHOLDER.encode())
            blobs[role] = data
        key = step.key
        relocated = False
        if step.relocate:  # a ptxas step of a unit whose PTX names the module id (its key reads the placeholder)
            if not self._relocatable(blobs, step.relocate):
                self._event(step.tool, step.arch, "uncached", seconds, reason="the module id's placeholder occurs")
                return
            blobs = _relocated(blobs, step.relocate)
            relocated = True
        elif any(v and v.encode() in data for v in step.volatile.values() for data in blobs.values()):
            # The outputs depend on where the source lives: the first key points at a second one that covers it,
            # or, when only the module id appears, at outputs stored with the id as its placeholder.
            self._put(_artefact(key, b"", {"kind": KIND_POINTER, "tool": step.tool}))
            module_id = step.volatile.get("module_id")
            src = step.volatile.get("--orig_src_path_name")
            if module_id and not (src and any(src.encode() in d for d in blobs.values())) \
                    and self._relocatable(blobs, module_id):
                blobs = _relocated(blobs, module_id)
                key, relocated = step.relocated_key(module_id), True
            else:
                key = step.volatile_key()
        outputs: dict[str, str] = {}
        for role, data in blobs.items():
            sub = hashlib.sha256(f"{key}:{role}".encode()).hexdigest()
            self._put(_artefact(sub, data, {"kind": KIND_OUTPUT, "tool": step.tool, "role": role,
                                            "target": step.arch}))
            outputs[role] = sub
        meta = {"kind": KIND_STEP, "tool": step.tool, "target": step.arch, "outputs": outputs,
                "key_components": step.components, "compile_seconds": round(seconds, 4),
                "output": output.replace(tmp, TMP_PLACEHOLDER), "relocated": relocated}
        main_role = {"cicc": "ptx", "ptxas": "cubin"}.get(step.tool, "gen_c")
        self._put(_artefact(key, blobs[main_role], meta))  # the step's record last: a partial entry is a miss
        self._event(step.tool, step.arch, "stored", seconds, key=step.key, **extra)

    @staticmethod
    def _relocatable(blobs: dict[str, bytes], module_id: str) -> bool:
        """Whether the outputs can be stored with ``module_id`` as its placeholder and restored exactly: the
        placeholder must not occur in them already."""
        placeholder = module_id_placeholder(module_id).encode()
        return all(placeholder not in data for data in blobs.values())

    # --- identities ---------------------------------------------------------------------------------------------
    def identity(self, env: Mapping[str, str], exe: str) -> dict[str, Any]:
        """nvcc's ``--version`` and the sha256 of the step's executable (memoised in the store by path, size and
        modification time, so that a 100 MB cicc is hashed once, not per file)."""
        with self._lock:
            return self._identity(env, exe)

    def _identity(self, env: Mapping[str, str], exe: str) -> dict[str, Any]:
        if self._identity_cache is None:
            proc = subprocess.run([self.nvcc, "--version"], env=dict(env), capture_output=True, text=True,
                                  check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("Cuda compilation", "Build "))]
            self._identity_cache = {"nvcc": lines or [proc.stdout.strip()]}
        out = dict(self._identity_cache)
        out["executable_sha256"] = self._tool_digest(exe)
        return out

    def _tool_digest(self, exe: str) -> str:
        real = Path(exe).resolve()
        st = real.stat()
        memo = hashlib.sha256(canonical_json({"kind": KIND_TOOL, "path": str(real), "size": st.st_size,
                                              "mtime_ns": st.st_mtime_ns, "inode": st.st_ino})).hexdigest()
        art = self._get(memo)
        if art is not None and art.meta.get("kind") == KIND_TOOL:
            return art.cubin.decode()
        h = hashlib.sha256()
        with real.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        self._put(_artefact(memo, digest.encode(), {"kind": KIND_TOOL, "path": str(real)}))
        return digest

    def _event(self, tool: str, arch: str, action: str, seconds: float, **extra: Any) -> None:
        ev = {"tool": tool, "arch": arch, "action": action, "seconds": round(seconds, 4), **extra}
        with self._lock:
            self._log(ev)

    def _log(self, ev: dict[str, Any]) -> None:
        self.events.append(ev)
        if self.log_path is not None:
            try:
                with self.log_path.open("a", encoding="utf-8") as f:  # one short line per write: atomic enough
                    f.write(json.dumps(ev, sort_keys=True) + "\n")
            except OSError as exc:
                log.warning("kbuild-nvcc: cannot write %s: %s", self.log_path, exc)


class _PlanRun:
    """The state of one plan's execution, shared by its commands when they run in parallel: what the preprocessing
    steps read (by command), the dependency file, the unit's module id (from its cicc steps, for its ptxas steps)."""

    def __init__(self, launcher: Launcher, plan: Plan, argvs: list[tuple[str, ...]], env: dict[str, str], tmp: str,
                 deps_target: str | None, *, capture_all: bool) -> None:
        self.launcher = launcher
        self.plan = plan
        self.argvs = argvs
        self.env = env
        self.tmp = tmp
        self.deps_target = deps_target
        self.capture_all = capture_all
        self.read: dict[int, list[str]] = {}
        self.read_known = True
        self.deps_file: tuple[Path, str] | None = None
        self.module_id: str | None = None

    def command(self, i: int) -> int:
        """Run (or answer from the store) command ``i``; its exit status."""
        la = self.launcher
        cmd, argv = self.plan.commands[i], self.argvs[i]
        if cmd.argv[0] == DEPS_STEP:
            assert self.deps_target is not None
            text = format_nvcc_deps(self.deps_target, union(self.read[j] for j in sorted(self.read)))
            path = la.cwd / cmd.argv[1]
            path.write_text(text)
            self.deps_file = (path, text)
            la._event("dependencies", "", "run", 0.0)
            return 0
        step: Step | None = None
        make = _STEPS.get(cmd.tool)
        if make is not None and la.store is not None:
            try:
                extra = {"module_id": self.module_id} if cmd.tool == "ptxas" else {}
                step = make(argv, cwd=la.cwd, tmp=self.tmp, identity=la.identity(self.env, argv[0]), **extra)
                if cmd.tool == "cicc":
                    self.module_id = step.volatile.get("module_id") or self.module_id
            except NotCacheable as exc:
                log.warning("kbuild-nvcc: %s runs uncached: %s", cmd.tool, exc)
                step = None
        if step is not None and la._restore(step, self.tmp):
            la._tuned(cmd.tool, step, argv, self.env)
            return 0
        t0 = time.perf_counter()
        rc, output, pid = la._run(argv, self.env, capture=step is not None or self.capture_all)
        pinned = None
        if rc == 0 and cmd.tool == "cudafe++":
            rc, pinned = self._pin_module_id(argv, pid)
        seconds = time.perf_counter() - t0
        if rc != 0:
            return rc
        if is_preprocess(cmd.argv):
            try:
                self.read[i] = parse_make_deps(Path(argv[-1]).read_text(errors="replace"))
            except OSError:
                self.read_known = False  # what the unit read is not known: no direct answer next time
        extra_ev: dict[str, Any] = {"start": round(t0 - la._t0, 4)}  # seconds after the launcher began
        if pinned:
            extra_ev["module_id_pinned"] = pinned
        if step is None:
            la._event(cmd.tool, "", "run" if cmd.tool not in _STEPS else "uncached", seconds, **extra_ev)
        else:
            la._save(step, self.tmp, output, seconds, **extra_ev)
            la._tuned(cmd.tool, step, argv, self.env)
        return 0

    def _pin_module_id(self, argv: Sequence[str], pid: int) -> tuple[int, str | None]:
        """After ``cudafe++`` generated the unit's module id: when it ends in that process's id, the id with
        :func:`kbuild.nvcc.module_id.unit_suffix` instead, and cudafe++ run again reading it
        (:mod:`kbuild.nvcc.module_id`). The exit status and the new id (None when nothing changed)."""
        if "--gen_module_id_file" not in argv:
            return 0, None
        path = module_id.module_id_file(argv, self.launcher.cwd)
        inputs = [a for a in argv[1:] if not a.startswith("-") and a.endswith(".ii")]
        if path is None or len(inputs) != 1:
            return 0, None
        generated = path.read_text(errors="replace").strip()
        if not module_id.pid_suffix(generated, pid):
            return 0, None
        new = module_id.pinned(generated, pid, module_id.unit_suffix(self.launcher.cwd / inputs[0], argv, self.tmp))
        path.write_text(new)
        rc, _, _ = self.launcher._run(module_id.read_mode(argv), self.env, capture=True, echo=False)
        return rc, new


def _relocated(blobs: dict[str, bytes], module_id: str) -> dict[str, bytes]:
    placeholder = module_id_placeholder(module_id).encode()
    return {role: data.replace(module_id.encode(), placeholder) for role, data in blobs.items()}


def _artefact(key: str, data: bytes, meta: dict[str, Any]) -> Any:
    from kbuild.cache import Artefact

    return Artefact.create(key=key, cubin=data, meta=meta)


def launch(argv: Sequence[str], *, cwd: Path | None = None) -> int:
    """``argv`` = ``[NVCC, ARGS...]``. Returns the exit status; a missing nvcc is a :class:`MissingDependencyError`."""
    from kbuild.settings.environ import env_with_prefix
    from kbuild.settings.sources import settings_from_table
    from kbuild.settings.variables import env_setting

    if not argv:
        raise MissingDependencyError("kbuild-nvcc: no nvcc given; usage: kbuild-nvcc NVCC [NVCC ARGUMENTS...] "
                                     "(argv[1] is the real nvcc, as CMAKE_CUDA_COMPILER_LAUNCHER passes it)")
    nvcc, args = argv[0], list(argv[1:])
    environ = env_with_prefix(("",))
    resolved = nvcc if os.sep in nvcc else shutil.which(nvcc, path=environ.get("PATH"))
    if resolved is None or not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise MissingDependencyError(f"kbuild-nvcc: nvcc {nvcc!r} not found or not executable (argv[1] must be the "
                                     "real nvcc; install it with pip install nvidia-cuda-nvcc, or see kbuild nvcc "
                                     "--where)")
    cwd = cwd or Path.cwd()
    log_path = env_setting("nvcc_log")
    with ExitStack() as stack:
        store = None
        if env_setting("nvcc_cache"):
            try:
                from kbuild.cache import open_store

                store = stack.enter_context(open_store(settings_from_table({}, where="environment")))
            except (StoreError, OSError) as exc:
                print(f"kbuild-nvcc: warning: no artefact store ({exc}); steps run uncached", file=sys.stderr)
        return Launcher(resolved, args, cwd=cwd, environ=environ, store=store, log_path=log_path).run()


def main(argv: Sequence[str] | None = None) -> int:
    """The ``kbuild-nvcc`` console script."""
    try:
        return launch(list(sys.argv[1:] if argv is None else argv))
    except KBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_code)


__all__ = ["Launcher", "launch", "main"]
