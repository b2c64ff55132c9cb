"""A memo of resolved keys, so that an all-hit build need not import Triton or the kernels.

Resolving (phase 1 of the pipeline) imports Triton and every kernel module to compute the keys;
that import is most of what an all-hit build costs. The memo records, after a full resolve, the
keys' components together with a fingerprint of everything they were computed from:

* kbuild's version, the Python version and the source files of the code that computes keys: every
  module of kbuild that the source of :mod:`kbuild.build.resolve` (and of this module) imports, transitively,
  lazy imports inside functions included (:func:`_kbuild_code`, derived from the ``import`` statements when the memo is written, so
  no module that decides a key can be left off a hand-kept list);
* Triton's version string (``__version__`` read from its source, not imported) and ptxas: the
  path, size and modification time of each binary Triton runs, and its ``--version``;
* the environment variables Triton reads while compiling: every ``TRITON_*``, the ``MLIR_*``,
  ``LLVM_*``, ``NVPTX_*``, ``AMDGCN_*`` and ``DISABLE_*`` switches of its passes, and the other
  names Triton's ``knobs`` read (recorded when the memo is written);
* every module the kernels' modules import, transitively, outside the standard library: the
  kernels, everything they import, wherever it lives (another package, a loose ``shared_consts.py``
  on ``sys.path``), Triton. The closure follows the ``import`` statements of each module's source
  (:func:`_import_closure`) through the modules loaded now, and stops at installed distributions
  (their ``RECORD`` covers what they import of their own); modules that other code of the same
  process loaded (a test runner's, a build tool's) are not part of it. An import by a computed name
  (``importlib.import_module(name)``) is not followed: keep such a module in the kernels' package,
  whose files are all hashed. A file that belongs to an installed distribution counts
  through the distribution's ``RECORD`` (name, version and the sha256 of ``RECORD``, which lists
  the sha256 of every file); any other file by its sha256. Each top-level module's location is
  recorded too, so that a module that now shadows it elsewhere on the path is noticed;
* every ``.py`` file of the kernels' packages (imported or not), ``pyproject.toml`` and ``kbuild.lock``;
* the kernel declarations, targets, tune mode and tuner settings;
* the global values Triton folds into each kernel (``SCALE = tl.constexpr(2.0)``, or
  ``consts.SCALE``; :func:`kbuild.compile.triton_aot.folded_globals`). Their files are in the
  fingerprint; a memo is written only when each value is *proven* to be a function of those files
  (:class:`kbuild.build.provenance.Provenance`): bound once, at the top of its module, to literals (arithmetic,
  ``tl.constexpr(...)`` and other such proven globals, or an import of one), and rebound by nothing.
  Rebinding is ruled out by reading the source of the defining module and of every file in the
  fingerprint whose module was loaded (of the kernels' packages, and the modules outside installed
  distributions they import; a file nothing imported never ran): none may assign or delete an
  attribute of that name (``consts.SCALE = ...`` in a package's
  ``__init__.py``), nor write a namespace without spelling the name it binds (``exec``, ``eval``,
  ``setattr`` with a computed name, ``vars(m)``, ``__dict__``, ``__setattr__``, ``__builtins__``;
  and in the defining module ``globals()``, ``locals()``, ``vars()``); a loose module that is not
  Python source (a compiled extension) cannot be read, so it is taken to rebind. A value computed at
  import time from anything else (an environment variable, a data file) could change with every file
  unchanged, so such a project always resolves in full: the keys come from importing the kernels,
  as without a memo. Code of other installed distributions (not the kernels' packages) is covered by
  their ``RECORD`` but not read for rebinding (it would rule out every kernel that imports torch); a
  distribution that writes into another package's module at import time is outside what the memo
  can see.

A later build recomputes the fingerprint from those files alone (no imports) and, when it is
unchanged, reuses the keys. Any difference, a missing file, a tool override (``KBUILD_PTXAS``)
or a Triton whose version cannot be read means no memo: the full resolve runs. The pipeline uses
memo keys only when every artefact is found in the store; on any miss it resolves in full, so
nothing is ever compiled from a memo. Memos live in ``<store>/memo/`` and may be deleted at any time.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbuild.distributions import located_files, owners, providers, record_file
from kbuild.fsutil import write_atomic
from kbuild.jsonio import read_json_file

from .provenance import Provenance

if TYPE_CHECKING:
    from kbuild.declarations.kernel import KernelSettings
    from kbuild.settings.model import Settings
    from kbuild.targets import Target

    from .kernel_build import KernelBuild

log = logging.getLogger(__name__)

MEMO_SCHEMA = 4
#: Where the code that computes keys starts: these modules and every kbuild module their source imports
#: (:func:`_kbuild_code`).
_KEY_CODE_ROOTS = ("kbuild.build.resolve", "kbuild.build.memo")
#: Environment variables Triton reads while compiling, by prefix (see the module docstring).
_ENV_PREFIXES = ("TRITON_", "MLIR_", "LLVM_", "NVPTX_", "AMDGCN_", "DISABLE_")


def _sha_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha_file(path: str | Path) -> str | None:
    try:
        return _sha_bytes(Path(path).read_bytes())
    except OSError:
        return None


def _triton_version() -> str | None:
    """Triton's ``__version__`` (what the keys record), read from its ``__init__.py`` without importing it."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.origin:
        return None
    try:
        text = Path(spec.origin).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    if m:
        return m.group(1)
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def _compile_env(names: Iterable[str] = ()) -> dict[str, str]:
    from kbuild.settings.environ import env_with_prefix

    return env_with_prefix(_ENV_PREFIXES, tuple(names))


def _settings_doc(settings: Settings, kernels: Sequence[KernelSettings], targets: Sequence[Target]) -> dict[str, Any]:
    from kbuild.key import tuner_component
    from kbuild.tune import TUNER_VERSION

    return {
        "kernels": [dataclasses.asdict(k) for k in kernels],
        "targets": [t.name for t in targets],
        "tune": settings.tune,
        "tuner": tuner_component(settings, version=TUNER_VERSION) if settings.tune != "off" else None,
        "python_path": list(settings.python_path),
        "project_dir": str(settings.project_dir),
    }


def _environment() -> dict[str, Any] | None:
    """What the memo depends on that can be read before the memo itself (cheap, no imports)."""
    from kbuild import __version__
    from kbuild.settings.variables import env_setting

    if any(env_setting(tool) for tool in ("ptxas", "nvdisasm", "cuobjdump")):  # a tool override: no memo
        return None
    triton = _triton_version()
    if triton is None:
        return None
    return {"schema": MEMO_SCHEMA, "kbuild": __version__, "python": sys.version, "executable": sys.executable,
            "triton": triton}


def _kbuild_code() -> dict[str, str] | None:
    """File → sha256 of every kbuild module that computes keys: :data:`_KEY_CODE_ROOTS` and, transitively,
    each ``kbuild.*`` module their source names in an ``import`` (inside functions too). Modules are located
    without importing them (a lazily imported one need not be loaded); None when one cannot be read."""
    from importlib.machinery import PathFinder

    files: dict[str, str] = {}
    where: dict[str, Any] = {}

    def spec_of(name: str) -> Any:
        if name not in where:
            mod = sys.modules.get(name)
            spec = getattr(mod, "__spec__", None) if mod is not None else None
            if spec is None:
                parent, _, _ = name.rpartition(".")
                locations = getattr(spec_of(parent), "submodule_search_locations", None) if parent else None
                spec = PathFinder.find_spec(name, list(locations)) if locations else None
            where[name] = spec
        return where[name]

    stack = list(_KEY_CODE_ROOTS)
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = spec_of(name)
        if spec is None:  # "from kbuild.m import f": f is a name in kbuild.m, not a module
            continue
        origin = spec.origin
        if origin in (None, "namespace"):  # a namespace package: its modules are found by their own names
            continue
        if not isinstance(origin, str) or not origin.endswith(".py"):
            return None
        data = _read(origin)
        if data is None:
            return None
        files[os.path.normpath(os.path.abspath(origin))] = _sha_bytes(data)
        package = name if spec.submodule_search_locations else name.rpartition(".")[0]
        for imported in _import_statements(data, package):
            if imported.partition(".")[0] == "kbuild":
                stack.extend(_with_parents(imported))
    return files


def _read(path: str | Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _import_statements(source: bytes, package: str) -> set[str]:
    """The absolute module names the ``import`` statements of ``source`` name (``from m import a``: ``m`` and
    ``m.a``, which may be a submodule or a name in ``m``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                    else node.module or ""
            except (ImportError, ValueError):
                continue
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _files_hold(files: Mapping[str, str]) -> bool:
    for f, digest in files.items():
        if _sha_file(f) != digest:
            log.debug("memo: %s changed", f)
            return False
    return True


def _memo_path(settings: Settings, doc: dict[str, Any]) -> Path:
    """One memo per declaration and Triton environment (builds that alternate ``TRITON_*`` settings keep both)."""
    ident = hashlib.sha256(json.dumps([doc, _compile_env()], sort_keys=True, default=str).encode()).hexdigest()
    return Path(settings.store_path) / "memo" / f"{ident[:32]}.json"


# ----------------------------------------------------------------------------------------------
# What was loaded: files, distributions, where each top-level module was found.

def _stdlib_dirs() -> tuple[list[str], list[str]]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    std = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if paths.get(k)}
    sites = {os.path.realpath(p) for p in (paths.get("purelib"), paths.get("platlib"), *site.getsitepackages(),
                                           site.getusersitepackages()) if p}
    return sorted(std), sorted(sites)


def _under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


def _distribution_files(top: str, cache: dict[str, list[tuple[Any, set[str]]]],
                        table: Mapping[str, Sequence[str]]) -> list[tuple[Any, set[str]]]:
    """The installed distributions that provide the top-level module ``top``, each with its files (``table``:
    :func:`kbuild.distributions.owners`)."""
    if top not in cache:
        cache[top] = [(dist, {os.path.normpath(os.path.abspath(f)) for f in located_files(dist)})
                      for dist in providers(top, table)]
    return cache[top]


def _record_of(dist: Any) -> Path | None:
    record = record_file(dist)
    return Path(os.path.abspath(record)) if record is not None else None


def _where(spec: Any) -> Any:
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
        return os.path.normpath(os.path.abspath(spec.origin))
    return sorted(str(p) for p in (spec.submodule_search_locations or [])) or spec.origin


def _imported_names(mod: Any) -> set[str]:
    """The absolute module names that the ``import`` statements in ``mod``'s source name (a name
    imported from a module counts as a submodule too, when one of that name is loaded)."""
    path = getattr(mod, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return set()
    data = _read(path)
    if data is None:
        return set()
    names = _import_statements(data, getattr(mod, "__package__", None) or "")
    return {parent for name in names for parent in _with_parents(name)}


def _import_closure(roots: Iterable[str], std: Sequence[str], sites: Sequence[str]) -> list[str]:
    """``roots`` and every loaded module their sources import, transitively; modules of the standard
    library and of installed distributions end the walk (they are covered as a whole)."""
    seen: set[str] = set()
    stack = [name for root in roots for name in _with_parents(root)]
    while stack:
        name = stack.pop()
        mod = sys.modules.get(name)
        if name in seen or mod is None:
            continue
        seen.add(name)
        path = getattr(mod, "__file__", None)
        if isinstance(path, str):
            real = os.path.realpath(path)
            if _under(real, std) or _under(real, sites):
                continue
        stack.extend(_imported_names(mod))
    return sorted(seen)


def _with_parents(name: str) -> list[str]:
    """``a.b.c`` → ``a``, ``a.b``, ``a.b.c``: importing a module runs its parent packages' ``__init__``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _loaded_code(settings: Settings, roots: Iterable[str]) -> dict[str, Any] | None:
    """Loose files (sha256), distributions (their ``RECORD``) and top-level locations of the modules
    in the import closure of ``roots`` (the kernels' modules) outside the standard library; None when
    some file cannot be read."""
    from kbuild.emit import kernel_sources

    std, sites = _stdlib_dirs()
    table = owners()  # read once: it walks every installed distribution
    dist_cache: dict[str, list[tuple[Any, set[str]]]] = {}
    files: dict[str, str] = {}
    dists: dict[str, dict[str, str]] = {}
    tops: dict[str, Any] = {}
    closure = _import_closure(roots, std, sites)
    for name, mod in ((n, sys.modules[n]) for n in closure):
        path = getattr(mod, "__file__", None)
        if not isinstance(path, str) or name == "__main__":
            continue
        path = os.path.normpath(os.path.abspath(path))
        if _under(os.path.realpath(path), std) and not _under(os.path.realpath(path), sites):
            continue
        top = name.partition(".")[0]
        if top not in tops:
            spec = getattr(sys.modules.get(top), "__spec__", None)
            if spec is None:
                try:
                    spec = importlib.util.find_spec(top)
                except (ImportError, ValueError):
                    return None
            tops[top] = _where(spec)
        owner = next(((d, fs) for d, fs in _distribution_files(top, dist_cache, table) if path in fs), None)
        record = _record_of(owner[0]) if owner is not None else None
        if owner is not None and record is not None:
            dist = owner[0]
            if dist.metadata["Name"] not in dists:
                digest = _sha_file(record)
                if digest is None:
                    return None
                dists[dist.metadata["Name"]] = {"version": dist.version, "record": str(record), "sha256": digest}
            continue
        digest = _sha_file(path)
        if digest is None:
            return None
        files[path] = digest
    for p in kernel_sources(settings):
        digest = _sha_file(p)
        if digest is None:
            return None
        files[str(p)] = digest
    return {"files": files, "dists": dists, "tops": tops}


def _loaded_code_holds(settings: Settings, code: dict[str, Any]) -> bool:
    for dist in code["dists"].values():
        if _sha_file(dist["record"]) != dist["sha256"]:
            log.debug("memo: %s changed", dist["record"])
            return False
    from kbuild.compile.triton_aot import project_on_path

    with project_on_path(settings):
        for top, where in code["tops"].items():
            try:
                now = _where(importlib.util.find_spec(top))
            except (ImportError, ValueError):
                now = None
            if now != where:
                log.debug("memo: %s is now found at %s, not %s", top, now, where)
                return False
    return _files_hold(code["files"])


def _ptxas_identity() -> list[dict[str, Any]] | None:
    """Each ptxas binary Triton would run: path, size, modification time; with the version the keys record."""
    from triton import knobs

    from kbuild.toolchain import ptxas_version

    out: list[dict[str, Any]] = []
    for tool in (knobs.nvidia.ptxas, knobs.nvidia.ptxas_blackwell):
        try:
            st = os.stat(tool.path)
        except OSError:
            return None
        out.append({"path": tool.path, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    out.append({"version": ptxas_version()})
    return out


def _ptxas_holds(identity: list[dict[str, Any]]) -> bool:
    for entry in identity:
        if "path" not in entry:
            continue
        try:
            st = os.stat(entry["path"])
        except OSError:
            return False
        if (st.st_size, st.st_mtime_ns) != (entry["size"], entry["mtime_ns"]):
            return False
    return True


# ----------------------------------------------------------------------------------------------
# Folded global values: is each one plainly a function of the files in the fingerprint (:mod:`.provenance`)?

def _loaded_files(files: Iterable[str]) -> list[str]:
    """Those of ``files`` that are the source of a module loaded in this process: the code that ran before the
    keys were computed (a file of the kernels' packages that nothing imported rebinds nothing)."""
    loaded = {os.path.normpath(os.path.abspath(f)) for m in list(sys.modules.values())
              if isinstance(f := getattr(m, "__file__", None), str)}
    return [f for f in files if f in loaded]


def _folded_values(builds: Sequence[KernelBuild], scope: Iterable[str]) -> dict[str, str] | None:
    """``{"module:name": value}`` of the globals Triton folds into these kernels; None when some value is
    not proven to be a function of the source files (see the module docstring). ``scope``: the loose source
    files of the fingerprint, each read for code that could rebind a value."""
    from kbuild.compile.triton_aot import folded_globals

    proof = Provenance(scope)
    out: dict[str, str] = {}
    for fn in {id(b.fn): b.fn for b in builds if b.fn is not None}.values():
        for g in folded_globals(fn):
            text = g.text
            if text is None or "." in g.name or not proof.proven(g.module, g.name):  # "Config.BLOCK": not proven
                log.debug("memo not written: %s:%s (folded into %s) is not proven constant: %s",
                          g.module, g.name, getattr(fn, "__name__", fn),
                          proof.why if text is not None and "." not in g.name else "not a plain module global")
                return None
            out[f"{g.module}:{g.name}"] = text
    return out


def _knob_names() -> list[str]:
    """Variables Triton's ``knobs`` read that the prefixes do not cover (``PTXAS_OPTIONS``, ``USE_IR_LOC``)."""
    from triton import knobs

    names = set()
    for group in vars(knobs).values():
        for desc in getattr(type(group), "__dict__", {}).values():
            key = getattr(desc, "key", None)
            if isinstance(key, str) and key.isupper() and not key.startswith(_ENV_PREFIXES):
                names.add(key)
    return sorted(names)


# ----------------------------------------------------------------------------------------------

def load(settings: Settings, kernels: Sequence[KernelSettings],
         targets: Sequence[Target]) -> list[dict[str, Any]] | None:
    """The memo's key components for these kernels × targets, when the fingerprint still holds."""
    try:
        env = _environment()
        if env is None:
            return None
        doc = _settings_doc(settings, kernels, targets)
        path = _memo_path(settings, doc)
        if not path.is_file():
            return None
        memo = read_json_file(path, error=ValueError)  # a damaged memo is a miss, like any other
        if not isinstance(memo, dict):
            return None
        if memo.get("environment") != env or memo.get("settings") != json.loads(json.dumps(doc, default=str)):
            return None
        if memo["triton_env"] != _compile_env(memo["env_names"]):
            log.debug("memo %s: Triton's environment changed", path)
            return None
        if not _files_hold(memo["kbuild_code"]) or not _ptxas_holds(memo["ptxas"]) \
                or not _loaded_code_holds(settings, memo["code"]):
            return None
        return list(memo["builds"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.debug("memo not used: %s", exc)
        return None


def save(settings: Settings, kernels: Sequence[KernelSettings], targets: Sequence[Target],
         builds: Sequence[KernelBuild]) -> None:
    """Record the keys of a full resolve (best effort: a memo that cannot be written is skipped)."""
    try:
        env = _environment()
        if env is None:
            return
        doc = _settings_doc(settings, kernels, targets)
        code = _loaded_code(settings, {b.fn.__module__ for b in builds if getattr(b, "fn", None) is not None})
        if code is None:
            return
        folded = _folded_values(builds, _loaded_files(code["files"]))
        ptxas = _ptxas_identity()
        kbuild_code = _kbuild_code()
        if folded is None or ptxas is None or kbuild_code is None:
            return
        for b in builds:  # the components must survive JSON with the same digest
            for key in (b.baseline_key, b.tuned_key):
                if key is not None and type(key)(json.loads(json.dumps(key.components))).hex != key.hex:
                    return
        names = _knob_names()
        memo = {"environment": env, "settings": json.loads(json.dumps(doc, default=str)),
                "env_names": names, "triton_env": _compile_env(names), "ptxas": ptxas, "code": code,
                "kbuild_code": kbuild_code,
                "folded_globals": folded,
                "builds": [{"kernel": b.spec.name, "target": b.target.name, "baseline": b.baseline_key.components,
                            "tuned": b.tuned_key.components if b.tuned_key is not None else None,
                            "spec": dataclasses.asdict(b.spec), "space": b.space} for b in builds]}
        for entry in memo["builds"]:  # the resolved declaration and space must survive JSON as they are
            if json.loads(json.dumps([entry["spec"], entry["space"]])) != [entry["spec"], entry["space"]]:
                return
        write_atomic(_memo_path(settings, doc), json.dumps(memo, sort_keys=True))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        log.debug("memo not written: %s", exc)
