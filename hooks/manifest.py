"""The wheel manifest, ``<name>.dist-info/kbuild.json``: what kernels a wheel ships, and how.

One entry per kernel × target, sorted, with the artefact key, the cubin digest, whether the
shipped cubin is ``tuned``, the ``baseline`` (never tuned), or ``baseline-kept`` (tuned, but no
schedule passed the acceptance rule), and the speedup the tuner measured for a tuned cubin. It holds nothing
that depends on the machine or the time of the build (no paths, no host, no reasons such as
"no GPU here"), so that reproducible builds give the same bytes::

    {"format": "kbuild-manifest/1", "kbuild_version": "0.1.0", "tune": "auto",
     "kernels": [{"kernel": "softmax", "target": "sm_90", "arch": "sm_90a", "key": "…",
                  "baseline_key": "…", "cubin_sha256": "…", "cubin_bytes": 6432,
                  "symbol": "softmax", "source": "pkg.mod:softmax", "state": "baseline",
                  "speedup": null}, …]}
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbuild import __version__
from kbuild.errors import UsageError

MANIFEST_FORMAT = "kbuild-manifest/1"
MANIFEST_NAME = "kbuild.json"


def manifest_entry(build: Any) -> dict[str, Any]:
    """The entry of one :class:`kbuild.hooks.pipeline.KernelBuild`."""
    art = build.artefact
    speedup = art.meta.get("speedup") if build.improved else None
    return {
        "kernel": build.spec.name,
        "target": build.target.name,
        "arch": build.target.arch,
        "key": art.key,
        "baseline_key": build.baseline_key.hex,
        "cubin_sha256": art.cubin_sha256,
        "cubin_bytes": len(art.cubin),
        "symbol": art.meta.get("symbol"),
        "source": build.spec.source,
        "state": build.state,
        "speedup": speedup if isinstance(speedup, (int, float)) else None,
    }


def build_manifest(builds: Iterable[Any], *, tune: str) -> dict[str, Any]:
    entries = sorted((manifest_entry(b) for b in builds), key=lambda e: (e["kernel"], e["target"]))
    return {"format": MANIFEST_FORMAT, "kbuild_version": __version__, "tune": tune, "kernels": entries}


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The one byte encoding of a manifest (sorted keys, two-space indent, final newline)."""
    return (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def parse_manifest(data: bytes | str, where: str) -> dict[str, Any]:
    """A manifest's content, checked for shape; :class:`UsageError` naming ``where`` otherwise."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or not isinstance(doc.get("kernels"), list):
        raise UsageError(f"{where}: not a kbuild manifest (expected format {MANIFEST_FORMAT!r})")
    for i, e in enumerate(doc["kernels"]):
        if not isinstance(e, dict) or not {"kernel", "target", "key", "cubin_sha256"} <= e.keys():
            raise UsageError(f"{where}: kernels[{i}]: expected kernel, target, key and cubin_sha256")
    return doc


def read_manifest(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        return parse_manifest(p.read_bytes(), str(p))
    except FileNotFoundError:
        raise UsageError(f"{p}: no such manifest") from None


def wheel_manifest(wheel: str | Path) -> dict[str, Any]:
    """The manifest inside ``wheel`` (``*.dist-info/kbuild.json``)."""
    path = Path(wheel)
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except zipfile.BadZipFile:
        raise UsageError(f"{path}: not a wheel (not a zip archive)") from None
    with zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                 and n.endswith("/" + MANIFEST_NAME)]
        if not names:
            raise UsageError(f"{path}: has no .dist-info/{MANIFEST_NAME}; it was not built with kbuild's build hooks")
        return parse_manifest(zf.read(names[0]), f"{path}!{names[0]}")


def manifest_kernels(manifest: dict[str, Any], store: Any, *, where: str) -> list[Any]:
    """The :class:`kbuild.emit.EmitKernel` list of exactly the artefacts a manifest names, from ``store``.

    One :class:`UsageError` lists every entry the store lacks or holds with another cubin.
    """
    from kbuild.emit import EmitKernel
    from kbuild.targets import parse_target

    grouped: dict[str, list[Any]] = {}
    sources: dict[str, str] = {}
    problems = []
    for e in manifest["kernels"]:
        art = store.get(e["key"])
        if art is None or art.cubin_sha256 != e["cubin_sha256"]:
            problems.append(f"  - {e['kernel']} / {e['target']}: key {e['key'][:16]}… "
                            + ("is in no store tier" if art is None else "has a different cubin in the store"))
            continue
        grouped.setdefault(e["kernel"], []).append((parse_target(e["target"]), art))
        sources[e["kernel"]] = str(e.get("source", ""))
    if problems:
        raise UsageError(f"{where}: {len(problems)} artefact(s) unavailable:\n" + "\n".join(problems))
    return [EmitKernel(n, sources[n], tuple(v)) for n, v in grouped.items()]


__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "build_manifest",
    "manifest_bytes",
    "manifest_entry",
    "manifest_kernels",
    "parse_manifest",
    "read_manifest",
    "wheel_manifest",
]
