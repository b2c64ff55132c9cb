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
                  "speedup": null, "config": {"constexprs": {"BLOCK": 1024}, "num_warps": 4,
                  "num_stages": 3, "maxnreg": null, "num_ctas": 1}, "default_config": true,
                  "gains": null, "grid": ["n_rows"]}, …]}

``config`` is the configuration the shipped cubin was compiled with (:mod:`kbuild.declarations.space`; per target, since
a tuned target may ship another than the default), ``default_config`` whether it is the declared default,
``gains`` the tuner's ``{"level1": ×, "level2": ×}`` (configuration over the default, SASS schedule over the
configuration) for a tuned entry that recorded them, and ``grid`` the kernel's grid expressions (empty: the
launcher takes the grid), which :func:`manifest_kernels` hands to the emitter. An entry made from a recording
(``[tool.kbuild] recordings``, :mod:`kbuild.build.recorded`) has ``recorded``: the recordings that hold it, whether
its kernel was imported as on the recording machine, and for an ``@triton.autotune`` kernel where its choice for
this target came from (``autotune.choice``: ``"recording"``, ``"triton-cache"``, or null: none, Triton's autotuner
benchmarks on the first call) with the tuning key it answers (``autotune.key``). Manifests from before these
fields read as before (each is optional).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from kbuild import __version__
from kbuild.errors import UsageError
from kbuild.fsutil import open_regular, read_bounded
from kbuild.jsonio import load_json, read_json_file

if TYPE_CHECKING:  # the manifest's readers (kbuild inspect, verify-wheel) import no more than they need
    from kbuild.emit import EmitKernel

    from .kernel_build import KernelBuild

MANIFEST_FORMAT = "kbuild-manifest/1"
MANIFEST_NAME = "kbuild.json"
#: Largest manifest read (a wheel's is a few kB per kernel × target); checked before reading.
MAX_MANIFEST_BYTES = 16 * 2**20
#: The states of a shipped cubin.
STATES = ("tuned", "baseline", "baseline-kept")

_HEX64 = re.compile(r"[0-9a-f]{64}")


def manifest_entry(build: KernelBuild) -> dict[str, Any]:
    """The entry of one :class:`~kbuild.build.kernel_build.KernelBuild` (which has its artefact)."""
    art = build.shipped
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
        "config": build.config,
        "default_config": build.is_default_config,
        "gains": _gains(art.meta.get("gains")) if build.tuned else None,
        "grid": list(build.spec.grid),
        **({"recorded": build.recorded.manifest()} if build.recorded is not None else {}),
    }


def _gains(value: Any) -> dict[str, float] | None:
    """The tuner's gains when they are a table of positive numbers, else None."""
    if not isinstance(value, dict):
        return None
    out = {str(k): float(v) for k, v in value.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}
    return out if out and len(out) == len(value) else None


def build_manifest(builds: Iterable[KernelBuild], *, tune: str, cuda: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """The manifest of ``builds`` (Triton kernels) and ``cuda`` (entries of CUDA C++ kernels, :func:`cuda_entries`:
    listed under ``cuda_kernels``, left out when there are none so that Triton-only manifests keep their bytes)."""
    entries = sorted((manifest_entry(b) for b in builds), key=lambda e: (e["kernel"], e["target"]))
    out = {"format": MANIFEST_FORMAT, "kbuild_version": __version__, "tune": tune, "kernels": entries}
    cuda_list = sorted(cuda, key=lambda e: (e["kernel"], e["target"]))
    if cuda_list:
        out["cuda_kernels"] = cuda_list
    return out


def cuda_entry(record: dict[str, Any]) -> dict[str, Any]:
    """The manifest entry of one CUDA C++ kernel × target from kbuild-nvcc's record (:mod:`kbuild.nvcc.tuned`): the
    Triton entry's fields (``key`` is the tuned key, under which a tuning result is or would be stored;
    ``baseline_cubin_sha256`` the cubin ptxas wrote), with ``ptxas`` the configuration level's point that ships
    (``{"maxrregcount", "minnctapersm"}``, 0: as compiled) instead of a Triton ``config``."""
    point = record.get("config") if record.get("state") == "tuned" else None
    return {"kernel": record["kernel"], "target": record["target"], "arch": record.get("arch"), "key": record["key"],
            "cubin_sha256": record["cubin_sha256"], "cubin_bytes": record.get("cubin_bytes"),
            "baseline_cubin_sha256": record.get("baseline_cubin_sha256"), "symbol": record.get("symbol"),
            "function": record.get("function"), "source": record.get("source"), "state": record.get("state"),
            "speedup": record.get("speedup") if record.get("state") == "tuned" else None,
            "ptxas": point if isinstance(point, dict) else {"maxrregcount": 0, "minnctapersm": 0}}


def cuda_entries(directory: str | Path) -> list[dict[str, Any]]:
    """The entries of the records kbuild-nvcc wrote into ``directory`` (``KBUILD_NVCC_RECORDS``), each checked; a
    record that is not one is a :class:`UsageError` naming its file."""
    from kbuild.nvcc.tuned import RECORD_FORMAT

    out = []
    for path in sorted(Path(directory).glob("*.json")):
        rec = read_json_file(path)
        if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
            raise UsageError(f"{path}: not a kbuild-nvcc record (format {RECORD_FORMAT!r})")
        try:
            entry = cuda_entry(rec)
        except KeyError as exc:
            raise UsageError(f"{path}: {exc.args[0]}: missing") from None
        where = str(path)

        def bad(key: str, message: str, where: str = where) -> None:
            raise UsageError(f"{where}: {key}: {message}")

        _check_entry(entry, "record", bad)
        out.append(entry)
    return out


def with_cuda(manifest: dict[str, Any], entries: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``manifest`` with ``cuda_kernels`` set to ``entries`` (sorted as :func:`build_manifest` sorts them; left out
    when there are none)."""
    out = {k: v for k, v in manifest.items() if k != "cuda_kernels"}
    cuda_list = sorted(entries, key=lambda e: (e["kernel"], e["target"]))
    if cuda_list:
        out["cuda_kernels"] = cuda_list
    return out


@contextlib.contextmanager
def nvcc_records(directory: Path) -> Iterator[Path]:
    """``KBUILD_NVCC_RECORDS=directory`` while the block runs, so that every kbuild-nvcc the build starts writes its
    records (:func:`kbuild.nvcc.tuned.write_records`) there; restored afterwards. Yields the directory the records
    land in: one the user set (``KBUILD_NVCC_RECORDS``) wins over ``directory``. The launcher replaces a kernel's
    records whenever it compiles the kernel's unit, so ``directory`` may live in a build directory that later builds
    reuse (a unit ninja finds up to date keeps its records from the build that compiled it)."""
    from kbuild.settings.environ import scoped
    from kbuild.settings.variables import env_setting, env_var

    mine = env_setting("nvcc_records")
    if mine is not None:
        yield Path(mine)
        return
    with scoped({env_var("nvcc_records"): str(directory)}):  # written for the children (CMake, ninja, kbuild-nvcc)
        yield directory


def declared_cuda_entries(settings: Any, records: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The manifest entries of the project's declared CUDA C++ kernels (``[[tool.kbuild.cuda.kernels]]``) from the
    records in ``records`` (records of kernels the project no longer declares are left out), and one line per
    declared kernel that has none: its unit did not compile through kbuild-nvcc in this build directory, so the
    manifest cannot list it."""
    declared = {k.name: k for k in settings.cuda.kernels}
    entries = [e for e in (cuda_entries(records) if records.is_dir() else []) if e["kernel"] in declared]
    seen = {e["kernel"] for e in entries}
    lines = [f"kbuild: warning: CUDA kernel {name} ({k.source}): no kbuild-nvcc record in this build, so the "
             "manifest does not list it (its unit did not compile through kbuild-nvcc: CMAKE_CUDA_COMPILER_LAUNCHER "
             "or PYTORCH_NVCC not set, or an up-to-date build directory from before the declaration)"
             for name, k in declared.items() if name not in seen]
    return entries, lines


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The one byte encoding of a manifest (sorted keys, two-space indent, final newline)."""
    return (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}.get(
        type(value), type(value).__name__)


def _check_entry(e: Any, at: str, bad: Any) -> None:
    from kbuild.targets import parse_target

    if not isinstance(e, dict):
        bad(at, f"expected a table, got {_kind(e)}")
    for field in ("kernel", "target", "key", "cubin_sha256"):
        if field not in e:
            bad(f"{at}.{field}", "missing (each entry needs kernel, target, key and cubin_sha256)")
    for field, required in (("kernel", True), ("target", True), ("key", True), ("cubin_sha256", True),
                            ("arch", False), ("source", False), ("state", False), ("baseline_key", False),
                            ("symbol", False)):
        value = e.get(field)
        if (required or value is not None) and not isinstance(value, str):
            bad(f"{at}.{field}", f"expected a string, got {_kind(value)}")
    if not e["kernel"].isidentifier():
        bad(f"{at}.kernel", f"{e['kernel']!r:.80} is not a kernel name (an identifier)")
    try:
        parse_target(e["target"][:64])
    except ValueError as exc:
        bad(f"{at}.target", str(exc))
    for field in ("key", "cubin_sha256", "baseline_key"):
        if e.get(field) is not None and not _HEX64.fullmatch(e[field]):
            bad(f"{at}.{field}", "expected 64 lowercase hex digits (a sha256)")
    if e.get("state") is not None and e["state"] not in STATES:
        bad(f"{at}.state", f"{e['state']!r:.80} is not one of {', '.join(STATES)}")
    size = e.get("cubin_bytes")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        bad(f"{at}.cubin_bytes", f"expected a byte count (an integer ≥ 0), got {_kind(size)}")
    speedup = e.get("speedup")
    if speedup is not None and (not isinstance(speedup, (int, float)) or isinstance(speedup, bool) or speedup <= 0):
        bad(f"{at}.speedup", f"expected a positive number or null, got {_kind(speedup)}")
    _check_config_fields(e, at, bad)
    _check_recorded(e.get("recorded"), f"{at}.recorded", bad)


def _check_recorded(value: Any, at: str, bad: Any) -> None:
    """``recorded`` (optional): ``{"recordings": [names], "imported_as_recorded": bool, "autotune": null |
    {"choice": "recording" | "triton-cache" | null, "key": list | null}}``."""
    if value is None:
        return
    if not isinstance(value, dict):
        bad(at, f"expected a table or null, got {_kind(value)}")
    names = value.get("recordings")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        bad(f"{at}.recordings", "expected a list of file names")
    if not isinstance(value.get("imported_as_recorded"), bool):
        bad(f"{at}.imported_as_recorded", f"expected true or false, got {_kind(value.get('imported_as_recorded'))}")
    autotune = value.get("autotune")
    if autotune is None:
        return
    if not isinstance(autotune, dict):
        bad(f"{at}.autotune", f"expected a table or null, got {_kind(autotune)}")
    if autotune.get("choice") is not None and not isinstance(autotune["choice"], str):
        bad(f"{at}.autotune.choice", f"expected a string or null, got {_kind(autotune['choice'])}")
    if autotune.get("key") is not None and not isinstance(autotune["key"], list):
        bad(f"{at}.autotune.key", f"expected a list or null, got {_kind(autotune['key'])}")


def _check_config_fields(e: dict[str, Any], at: str, bad: Any) -> None:
    """``config``, ``default_config``, ``gains`` and ``grid``: each optional, each of its shape when present."""
    from kbuild.declarations.grid import GridExprError, parse_grid
    from kbuild.declarations.signature import SignatureError, dtype_constexpr
    from kbuild.declarations.space import SpaceError, normalize_point

    if e.get("config") is not None:
        try:
            normalize_point(e["config"], where="config")
        except SpaceError as exc:
            bad(f"{at}.{exc.key}", exc.detail)
        for name, v in (e["config"].get("constexprs") or {}).items():
            try:
                if not isinstance(v, (bool, int, float, str)) and dtype_constexpr(v) is None:
                    raise SignatureError(None, "expected a scalar or a dtype table")
            except SignatureError as exc:
                bad(f"{at}.config.constexprs.{name}", str(exc))
    if e.get("default_config") is not None and not isinstance(e["default_config"], bool):
        bad(f"{at}.default_config", f"expected true, false or null, got {_kind(e['default_config'])}")
    gains = e.get("gains")
    if gains is not None:
        if not isinstance(gains, dict):
            bad(f"{at}.gains", f"expected a table of positive numbers or null, got {_kind(gains)}")
        for name, value in gains.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < float("inf"):
                bad(f"{at}.gains.{name!s:.40}", f"expected a positive number, got {_kind(value)}")
    grid = e.get("grid")
    if grid is not None:
        if not isinstance(grid, list) or not all(isinstance(g, str) for g in grid) or len(grid) > 3:
            bad(f"{at}.grid", "expected a list of at most 3 expression strings")
        if grid:
            try:
                parse_grid(grid)
            except GridExprError as exc:
                key, _, message = str(exc).partition(": ")
                bad(f"{at}.{key}", message)


def check_manifest(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` if it has the shape of a manifest: the one place that checks every field a reader uses.

    Otherwise one :class:`UsageError` (exit 2) naming ``where`` and the key, e.g.
    ``dist/x.whl!x.dist-info/kbuild.json: kernels[2].cubin_bytes: expected a byte count ...``."""
    def bad(key: str, message: str) -> None:
        raise UsageError(f"{where}: {key}: {message}")

    if not isinstance(doc, dict):
        raise UsageError(f"{where}: not a kbuild manifest (expected a table with format {MANIFEST_FORMAT!r}, "
                         f"got {_kind(doc)})")
    if doc.get("format") != MANIFEST_FORMAT:
        bad("format", f"expected {MANIFEST_FORMAT!r}, got {doc.get('format')!r:.80}; not a kbuild manifest")
    if not isinstance(doc.get("kernels"), list):
        bad("kernels", f"expected a list, got {_kind(doc.get('kernels'))}")
    for field in ("kbuild_version", "tune"):
        if doc.get(field) is not None and not isinstance(doc[field], str):
            bad(field, f"expected a string, got {_kind(doc[field])}")
    cuda = doc.get("cuda_kernels")
    if cuda is not None and not isinstance(cuda, list):
        bad("cuda_kernels", f"expected a list, got {_kind(cuda)}")
    for i, e in enumerate(cuda or []):
        _check_entry(e, f"cuda_kernels[{i}]", bad)
    seen: dict[tuple[str, str], int] = {}
    for i, e in enumerate(doc["kernels"]):
        _check_entry(e, f"kernels[{i}]", bad)
        pair = (e["kernel"], e["target"])
        if pair in seen:
            bad(f"kernels[{i}]", f"kernel {pair[0]!r} target {pair[1]!r} is listed twice (also kernels[{seen[pair]}])")
        seen[pair] = i
    return doc


def parse_manifest(data: bytes | str, where: str) -> dict[str, Any]:
    """A manifest's content, checked for shape (:func:`check_manifest`); :class:`UsageError` naming ``where``
    otherwise (not JSON, nested too deep, over :data:`MAX_MANIFEST_BYTES`...)."""
    return check_manifest(load_json(data, where=where, max_bytes=MAX_MANIFEST_BYTES), where)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest file ``path`` (a ``kbuild.json``), read with :func:`kbuild.fsutil.read_bounded` (a regular file
    of at most :data:`MAX_MANIFEST_BYTES`)."""
    p = Path(path)
    try:
        data = read_bounded(p, max_bytes=MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{p}: no such manifest") from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a directory, not a kbuild.json manifest") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the manifest: {exc.strerror or exc}") from None
    return check_manifest(load_json(data, where=str(p), max_bytes=MAX_MANIFEST_BYTES), str(p))


def open_wheel(wheel: str | Path) -> zipfile.ZipFile:
    """``wheel`` opened as a zip archive; anything that is not a readable zip file is a UsageError naming it."""
    path = Path(wheel)
    try:  # a regular file only (fsutil.open_regular): a FIFO would block, /dev/zero read without end
        open_regular(path).close()
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory, not a wheel (.whl file)") from None
    except (zipfile.BadZipFile, EOFError):
        raise UsageError(f"{path}: not a wheel (not a zip archive)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


@overload
def wheel_manifest(wheel: str | Path, *, missing_ok: Literal[False] = False) -> dict[str, Any]: ...
@overload
def wheel_manifest(wheel: str | Path, *, missing_ok: bool) -> dict[str, Any] | None: ...
def wheel_manifest(wheel: str | Path, *, missing_ok: bool = False) -> dict[str, Any] | None:
    """The manifest inside ``wheel`` (``*.dist-info/kbuild.json``); its size is checked before it is read.
    ``missing_ok``: None for a wheel without one (any other fault is still an error)."""
    path = Path(wheel)
    with open_wheel(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                 and n.endswith("/" + MANIFEST_NAME)]
        if not names and missing_ok:
            return None
        if not names:
            raise UsageError(f"{path}: has no .dist-info/{MANIFEST_NAME}; it was not built with kbuild's build hooks")
        if len(names) > 1:
            raise UsageError(f"{path}: has {len(names)} manifests ({', '.join(sorted(names))}); a wheel has one")
        where = f"{path}!{names[0]}"
        info = zf.getinfo(names[0])
        if info.file_size > MAX_MANIFEST_BYTES:
            raise UsageError(f"{where}: {info.file_size:,} bytes, over the {MAX_MANIFEST_BYTES:,}-byte limit "
                             "for a manifest")
        try:
            with zf.open(info) as f:
                data = f.read(MAX_MANIFEST_BYTES + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
            raise UsageError(f"{where}: cannot read the member: {exc}") from None
        return parse_manifest(data, where)


def _record_line(name: str, data: bytes) -> str:
    """A wheel ``RECORD`` row (PEP 376/427: urlsafe base64 sha256 without padding, size)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _without_zip64(extra: bytes) -> bytes:
    """``extra`` without its zip64 field (id 1): zipfile writes its own where the new entry needs one."""
    out, i = b"", 0
    while i + 4 <= len(extra):
        tag, size = int.from_bytes(extra[i:i + 2], "little"), int.from_bytes(extra[i + 2:i + 4], "little")
        if tag != 1:
            out += extra[i:i + 4 + size]
        i += 4 + size
    return out + extra[i:]


def _entry_like(info: zipfile.ZipInfo, name: str | None = None) -> zipfile.ZipInfo:
    """A new archive entry with ``info``'s date, mode, compression and extra fields (named ``name`` if given)."""
    new = zipfile.ZipInfo(info.filename if name is None else name, date_time=info.date_time)
    for field in ("compress_type", "comment", "create_system", "create_version", "extract_version",
                  "external_attr", "internal_attr"):
        setattr(new, field, getattr(info, field))
    if name is None:
        new.extra = _without_zip64(info.extra)
        new.file_size = info.file_size  # the zip64 decision of a streamed copy
    return new


def write_wheel_manifest(wheel: str | Path, manifest: dict[str, Any]) -> str:
    """Put ``manifest`` into ``wheel`` as ``<name>.dist-info/kbuild.json`` (replacing one it has, else just before
    ``RECORD``), with its ``RECORD`` row; every other member is copied with its own entry (name, date, mode,
    compression) and order, so that a reproducible wheel stays reproducible. The wheel is replaced atomically;
    returns the member's name. A file that is not a wheel is a :class:`UsageError` naming it."""
    path = Path(wheel)
    data = manifest_bytes(check_manifest(manifest, f"the manifest for {path}"))
    with open_wheel(path) as zf:
        infos = zf.infolist()
        records = [i.filename for i in infos if i.filename.count("/") == 1
                   and i.filename.split("/")[0].endswith(".dist-info") and i.filename.endswith("/RECORD")]
        if len(records) != 1:
            raise UsageError(f"{path}: not a wheel (expected one .dist-info/RECORD, found {len(records)})")
        record_name = records[0]
        member = f"{record_name.split('/')[0]}/{MANIFEST_NAME}"
        rows = [r for r in zf.read(record_name).decode("utf-8").splitlines()
                if r and r.split(",", 1)[0] != member]
        at = next((i for i, r in enumerate(rows) if r.split(",", 1)[0] == record_name), len(rows))
        rows.insert(at, _record_line(member, data))
        record_data = ("\n".join(rows) + "\n").encode("utf-8")
        has_member = any(i.filename == member for i in infos)
        tmp = path.with_name(f".{path.name}.kbuild-tmp")
        try:
            with zipfile.ZipFile(tmp, "w") as out:
                out.comment = zf.comment
                for info in infos:
                    if info.filename == record_name:
                        if not has_member:
                            out.writestr(_entry_like(info, member), data)
                        out.writestr(_entry_like(info), record_data)
                    elif info.filename == member:
                        out.writestr(_entry_like(info), data)
                    else:
                        with zf.open(info) as src, out.open(_entry_like(info), "w") as dst:
                            shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return member


def manifest_kernels(manifest: dict[str, Any], store: Any, *, where: str) -> list[EmitKernel]:
    """The :class:`kbuild.emit.EmitKernel` list of exactly the artefacts a manifest names, from ``store``.

    One :class:`UsageError` lists every entry the store lacks or holds with another cubin.
    """
    from kbuild.emit import EmitKernel
    from kbuild.targets import parse_target

    grouped: dict[str, list[Any]] = {}
    sources: dict[str, str] = {}
    grids: dict[str, tuple[str, ...]] = {}
    problems = []
    for e in manifest["kernels"]:
        art = store.get(e["key"])
        if art is None or art.cubin_sha256 != e["cubin_sha256"]:
            problems.append(f"  - {e['kernel']} / {e['target']}: key {e['key'][:16]}… "
                            + ("is in no store tier" if art is None else "has a different cubin in the store"))
            continue
        grouped.setdefault(e["kernel"], []).append((parse_target(e["target"]), art))
        sources[e["kernel"]] = str(e.get("source", ""))
        grids[e["kernel"]] = tuple(e.get("grid") or ())
    if problems:
        raise UsageError(f"{where}: {len(problems)} artefact(s) unavailable:\n" + "\n".join(problems))
    return [EmitKernel(n, sources[n], tuple(v), grids[n]) for n, v in grouped.items()]


__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "STATES",
    "build_manifest",
    "check_manifest",
    "cuda_entries",
    "cuda_entry",
    "declared_cuda_entries",
    "manifest_bytes",
    "manifest_entry",
    "manifest_kernels",
    "nvcc_records",
    "parse_manifest",
    "read_manifest",
    "wheel_manifest",
    "with_cuda",
    "write_wheel_manifest",
]
