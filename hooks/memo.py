"""A memo of resolved keys, so that an all-hit build need not import Triton or the kernels.

Resolving (phase 1 of the pipeline) imports Triton and every kernel module to compute the keys;
that import is most of what an all-hit build costs. The memo records, after a full resolve, the
keys' components together with a fingerprint of everything they were computed from:

* kbuild's version and the source files of the code that computes keys;
* Triton's installed files (its ``RECORD``, which lists the sha256 of every file, ptxas included)
  and the Python version;
* the kernel declarations, targets, tune mode and tuner settings;
* the contents of every file the keys can depend on: the kernels' packages, and every module
  that holds a ``@triton.jit`` function (a callee's source enters Triton's source hash), apart
  from Triton's own (covered by its ``RECORD``).

A later build recomputes the fingerprint from those files alone (no imports) and, when it is
unchanged, reuses the keys. Any difference, a missing file, a tool override (``KBUILD_PTXAS``), or
a Triton without a ``RECORD`` means no memo: the full resolve runs. The pipeline uses memo keys
only when every artefact is found in the store; on any miss it resolves in full, so nothing is
ever compiled from a memo. Memos live in ``<store>/memo/`` and may be deleted at any time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kbuild.fsutil import write_atomic

log = logging.getLogger(__name__)

MEMO_SCHEMA = 1
#: Modules of kbuild whose code decides the keys.
_KEY_CODE = ("kbuild.key", "kbuild.compile.triton_aot", "kbuild.targets", "kbuild.config", "kbuild.tune",
             "kbuild.hooks.pipeline", "kbuild.hooks.memo")


def _sha_file(path: str | Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _module_file(name: str) -> str | None:
    mod = sys.modules.get(name)
    origin = getattr(mod, "__file__", None) if mod is not None else None
    if origin is None:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
    return origin


def _triton_record() -> str | None:
    from importlib import metadata

    try:
        text = metadata.distribution("triton").read_text("RECORD")
    except metadata.PackageNotFoundError:
        return None
    return hashlib.sha256(text.encode()).hexdigest() if text else None


def _settings_doc(settings: Any, kernels: Sequence[Any], targets: Sequence[Any]) -> dict[str, Any]:
    import dataclasses

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
    from kbuild import __version__
    from kbuild.config import env_value

    if any(env_value(f"KBUILD_{tool}") for tool in ("PTXAS", "NVDISASM", "CUOBJDUMP")):
        return None
    record = _triton_record()
    if record is None:
        return None
    code = {}
    for name in _KEY_CODE:
        f = _module_file(name)
        digest = _sha_file(f) if f else None
        if digest is None:
            return None
        code[name] = digest
    return {"schema": MEMO_SCHEMA, "kbuild": __version__, "python": sys.version, "triton_record": record,
            "code": code}


def _memo_path(settings: Any, doc: dict[str, Any]) -> Path:
    ident = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    return Path(settings.store_path) / "memo" / f"{ident[:32]}.json"


def dependency_files(settings: Any, kernel_fns: Iterable[Any]) -> list[str]:
    """The files the keys of these (imported) kernels can depend on; see the module docstring."""
    from triton.runtime.jit import JITFunction

    from kbuild.emit import kernel_sources

    files = {str(p) for p in kernel_sources(settings)}
    for fn in kernel_fns:
        mod = sys.modules.get(getattr(fn, "__module__", "") or "")
        mod_file = getattr(mod, "__file__", None)
        if mod_file:
            files.add(str(Path(mod_file).resolve()))
    import triton

    triton_dir = str(Path(triton.__file__).resolve().parent)
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if not path or str(Path(path).resolve()).startswith(triton_dir + os.sep):
            continue
        try:
            values = list(vars(mod).values())
        except TypeError:
            continue
        if any(isinstance(v, JITFunction) for v in values):
            files.add(str(Path(path).resolve()))
    return sorted(files)


def load(settings: Any, kernels: Sequence[Any], targets: Sequence[Any]) -> list[dict[str, Any]] | None:
    """The memo's key components for these kernels × targets, when the fingerprint still holds."""
    try:
        env = _environment()
        if env is None:
            return None
        doc = _settings_doc(settings, kernels, targets)
        path = _memo_path(settings, doc)
        if not path.is_file():
            return None
        memo = json.loads(path.read_text())
        if memo.get("environment") != env or memo.get("settings") != json.loads(json.dumps(doc, default=str)):
            return None
        for f, digest in memo["files"].items():
            if _sha_file(f) != digest:
                log.debug("memo %s: %s changed", path, f)
                return None
        return list(memo["builds"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("memo not used: %s", exc)
        return None


def save(settings: Any, kernels: Sequence[Any], targets: Sequence[Any], builds: Sequence[Any]) -> None:
    """Record the keys of a full resolve (best effort: a memo that cannot be written is skipped)."""
    try:
        env = _environment()
        if env is None:
            return
        doc = _settings_doc(settings, kernels, targets)
        files = {}
        for f in dependency_files(settings, {b.fn for b in builds if b.fn is not None}):
            digest = _sha_file(f)
            if digest is None:
                return
            files[f] = digest
        for b in builds:  # the components must survive JSON with the same digest
            for key in (b.baseline_key, b.tuned_key):
                if key is not None and type(key)(json.loads(json.dumps(key.components))).hex != key.hex:
                    return
        memo = {"environment": env, "settings": json.loads(json.dumps(doc, default=str)), "files": files,
                "builds": [{"kernel": b.spec.name, "target": b.target.name, "baseline": b.baseline_key.components,
                            "tuned": b.tuned_key.components if b.tuned_key is not None else None} for b in builds]}
        write_atomic(_memo_path(settings, doc), json.dumps(memo, sort_keys=True))
    except (OSError, ValueError, TypeError) as exc:
        log.debug("memo not written: %s", exc)
