"""Where the settings come from: ``[tool.kbuild]`` of ``pyproject.toml``, PEP 517 config settings, the environment
and command-line flags, read into the model (:mod:`kbuild.settings.model`).

Sources, each beating the ones before it: defaults, ``pyproject.toml``'s ``[tool.kbuild]``, PEP 517 config settings
(``pip wheel -C kbuild.locked=true``), the environment (``KBUILD_LOCKED=1``, :mod:`kbuild.settings.variables`), and
last the command-line flags that exist (``kbuild emit --locked``; :func:`apply_flags`, and :func:`apply_flag`, which
holds a flag's value to the field's rules). A field marked ``env_only`` (a secret, a path on this machine, a switch
of one process) comes from the environment alone. Strings become booleans by one rule,
:func:`kbuild.settings.environ.parse_bool`. A wrong type or an unknown key raises :class:`kbuild.errors.ConfigError`
naming the file (or variable, or config setting, or flag) and the dotted key, and suggests the closest valid key.
Each ``[[tool.kbuild.kernels]]`` table is checked by the declaration grammar
(:func:`kbuild.declarations.kernel.expand_entries`), its errors naming this file.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

from kbuild.declarations.kernel import KernelSettings, expand_entries
from kbuild.errors import COMMAND_LINE, ConfigError, dotted_key

from .fields import Converter, from_string, type_hints, value_name
from .model import CudaSettings, Settings
from .variables import env_field

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_settings(pyproject: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None,
                  require_table: bool = True, config_settings: Mapping[str, Any] | None = None,
                  document: Mapping[str, Any] | None = None) -> Settings:
    """Read ``[tool.kbuild]`` from ``pyproject`` (default ``./pyproject.toml``), then apply the PEP 517
    ``config_settings`` (``kbuild.*`` keys) and ``KBUILD_*``. ``document``: the file, already read with
    :func:`read_pyproject` (a build backend reads it once).

    Raises :class:`ConfigError` (exit status 2) for a missing file, bad TOML, a missing table when
    ``require_table``, an unknown key, a wrong type, or an invalid kernel declaration.
    """
    path = Path(pyproject) if pyproject is not None else Path("pyproject.toml")
    where = str(path)
    data = read_pyproject(path) if document is None else document
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(where, "tool", f"expected a table ([tool]), got {value_name(tool)}")
    table = tool.get("kbuild")
    if table is None:
        if require_table:
            raise ConfigError(where, "[tool.kbuild]", "table is missing; declare your kernels there (see the README)")
        table = {}
    return settings_from_table(table, where=where, project_dir=path.resolve().parent, environ=environ,
                               config_settings=config_settings)


#: Largest ``pyproject.toml`` read (a project's is a few kB; thousands of declared kernels stay far below).
MAX_PYPROJECT_BYTES = 16 * 2**20


def read_pyproject(pyproject: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed TOML file: kbuild's one reader of ``pyproject.toml``, through :func:`kbuild.fsutil.read_bounded`
    (a regular file of at most :data:`MAX_PYPROJECT_BYTES`). A :class:`ConfigError` naming the file when it is
    missing, unreadable, not a regular file, too large, not UTF-8 or not TOML."""
    from kbuild.fsutil import read_bounded

    path = Path(pyproject)
    where = str(path)
    try:
        text = read_bounded(path, max_bytes=MAX_PYPROJECT_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(where, "(file)", "no such file; pass --config PATH to a pyproject.toml") from None
    except OSError as exc:
        raise ConfigError(where, "(file)", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(where, "(file)", f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                                           f"{exc.start}); TOML files must be UTF-8") from None
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, and an integer of more than 4300 digits
        raise ConfigError(where, "(file)", f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and inline tables
        raise ConfigError(where, "(file)", "not valid TOML: arrays or inline tables nested too deeply") from None
    return data


def settings_from_table(table: Mapping[str, Any], *, where: str = "<table>", project_dir: Path | None = None,
                        environ: Mapping[str, str] | None = None,
                        config_settings: Mapping[str, Any] | None = None) -> Settings:
    """The settings of ``table`` (``[tool.kbuild]``, as read from ``where``; relative paths from ``project_dir``),
    then the PEP 517 ``config_settings`` and the environment (``environ``, default ``os.environ``) over it; each
    kernel table expanded into its checked entries. A :class:`ConfigError` naming ``where`` and the key."""
    conv = Converter(where)
    if not isinstance(table, dict):
        raise conv.error("[tool.kbuild]", f"expected a table, got {value_name(table)}")
    kernels = table.get("kernels")
    base = conv.dataclass(Settings, {k: v for k, v in table.items() if k != "kernels"}, "")
    # Kernels get their own path notation: [tool.kbuild.kernels][i].key
    parsed: list[KernelSettings] = []
    if kernels is not None:
        if not isinstance(kernels, list):
            raise conv.error("[tool.kbuild.kernels]", f"expected an array of tables, got {value_name(kernels)}")
        for i, k in enumerate(kernels):
            kpath = f"[tool.kbuild.kernels][{i}]"
            if not isinstance(k, dict):
                raise conv.error(kpath, f"expected a table, got {value_name(k)}")
            parsed.extend(expand_entries(conv.dataclass(KernelSettings, k, kpath), i, kpath, conv.error))
    names = [k.name for k in parsed]
    for j, (k, n) in enumerate(zip(parsed, names)):
        if n in names[:j]:
            raise conv.error(f"[tool.kbuild.kernels][{k.entry}].name", f"duplicate kernel name {n!r}"
                             + (f" (variant {k.label})" if k.variant_of is not None else ""))
    _validate_cuda(base.cuda, conv)
    settings = dataclasses.replace(base, kernels=parsed, project_dir=project_dir or Path.cwd(), config_file=where)
    settings = _apply_environment(_apply_config_settings(settings, config_settings), environ)
    _check_types_on_targets(settings, conv)
    return settings


def _validate_cuda(cuda: CudaSettings, conv: Converter) -> None:
    """``[[tool.kbuild.cuda.kernels]]``: names, the function, the source, the bench spec and the ptxas values."""
    seen: set[str] = set()
    for i, k in enumerate(cuda.kernels):
        path = f"cuda.kernels[{i}]"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k.name):
            raise conv.error(f"{path}.name", f"{k.name!r} is not an identifier (letters, digits and _)")
        if k.name in seen:
            raise conv.error(f"{path}.name", f"duplicate CUDA kernel name {k.name!r}")
        seen.add(k.name)
        if not k.function.strip() or any(c in k.function for c in "\n\r\0"):
            raise conv.error(f"{path}.function", f"expected the demangled name of a __global__ function, got "
                                                 f"{k.function!r}")
        src = Path(k.source)
        if not k.source.strip() or src.is_absolute() or ".." in src.parts:
            raise conv.error(f"{path}.source", f"expected a path inside the project, relative to pyproject.toml, "
                                               f"got {k.source!r}")
        if k.bench is not None:
            mod, sep, fn = k.bench.partition(":")
            if not sep or not all(p.isidentifier() for p in mod.split(".")) or not fn.isidentifier():
                raise conv.error(f"{path}.bench", f"expected \"package.module:function\", got {k.bench!r}")
        for j, v in enumerate(k.maxrregcount):
            if v != 0 and not 24 <= v <= 255:
                raise conv.error(f"{path}.maxrregcount[{j}]", f"expected 0 (as compiled) or 24 to 255, got {v}")
        for j, v in enumerate(k.minnctapersm):
            if not 0 <= v <= 32:
                raise conv.error(f"{path}.minnctapersm[{j}]", f"expected 0 (as compiled) to 32, got {v}")


def _check_types_on_targets(s: Settings, conv: Converter) -> None:
    """A parameter type that a target lacks (fp8e4nv before sm_89) is the configuration's error, not Triton's."""
    for i, k in enumerate(s.kernels):
        for pname, ty in k.signature.items():
            for t in s.parsed_targets:
                problem = t.type_problem(ty.strip())
                if problem:
                    raise conv.error(dotted_key(f"[tool.kbuild.kernels][{i if k.entry is None else k.entry}].signature",
                                               pname),
                                     f"{problem} (targets: {', '.join(s.targets)})")


def _apply_environment(s: Settings, environ: Mapping[str, str] | None) -> Settings:
    """Overlay ``KBUILD_*`` variables declared in field metadata (recursing into nested tables)."""

    def overlay(obj: Any, prefix: str) -> Any:
        changes: dict[str, Any] = {}
        hints = type_hints(type(obj))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                new = overlay(value, f"{prefix}{f.name}.")
                if new is not value:
                    changes[f.name] = new
                continue
            found, new_value = env_field(f, hints[f.name], environ)
            if found:
                changes[f.name] = new_value
        return dataclasses.replace(obj, **changes) if changes else obj

    return overlay(s, "")


#: The prefix of kbuild's PEP 517 config settings: ``-C kbuild.locked=true``, ``-C kbuild.budget.seconds=60``.
CONFIG_SETTINGS_PREFIX = "kbuild."


def _config_setting_fields(cls: Any, above: tuple[str, ...] = ()) -> dict[str, tuple[tuple[str, ...], Any, Any]]:
    """``kbuild.<dotted name>`` → (field path, field, type) of every field a config setting may give."""
    out: dict[str, tuple[tuple[str, ...], Any, Any]] = {}
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if f.metadata.get("internal"):
            continue
        if dataclasses.is_dataclass(tp):
            out.update(_config_setting_fields(tp, (*above, f.name)))
        else:
            out[CONFIG_SETTINGS_PREFIX + ".".join((*above, f.name))] = ((*above, f.name), f, tp)
    return out


def _apply_config_settings(s: Settings, config_settings: Mapping[str, Any] | None) -> Settings:
    """Overlay the PEP 517 config settings under ``kbuild.`` (dashes or underscores). Values are strings read as
    the environment's are; of a repeated key (a list) a list setting takes every value, any other the last. An
    empty value counts as unset. Keys of other tools are left alone; an unknown ``kbuild.`` key is an error
    suggesting the closest one."""
    given = {str(k): v for k, v in (config_settings or {}).items() if str(k).startswith(CONFIG_SETTINGS_PREFIX)}
    if not given:
        return s
    conv = Converter("config-settings")
    known = _config_setting_fields(Settings)
    for key, value in given.items():
        entry = known.get(key.replace("-", "_"))
        if entry is None:
            hint = difflib.get_close_matches(key.replace("-", "_"), list(known), n=1)
            raise conv.error(key, "unknown setting" + (f"; did you mean {hint[0]!r}?" if hint else ""))
        path, f, tp = entry
        if f.metadata.get("env_only"):
            raise conv.error(key, f"environment only: set {f.metadata['env']} instead")
        if get_origin(tp) is list and dataclasses.is_dataclass(get_args(tp)[0]):
            raise conv.error(key, "tables cannot be given as config settings; declare them in pyproject.toml")
        values = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        raw = ",".join(values) if get_origin(tp) is list else (values[-1] if values else "")
        if raw == "":
            continue
        new = from_string(raw, tp, conv, key)
        check = f.metadata.get("check")
        if check is not None:
            check(new, conv, key)
        s = _replace_at(s, path, new)
    return s


def _replace_at(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    head, *rest = path
    return dataclasses.replace(obj, **{head: _replace_at(getattr(obj, head), tuple(rest), value) if rest else value})


def flag_setting(name: str, value: Any, flag: str) -> Any:
    """The value of the command-line flag ``flag`` for the setting ``name`` (``seed``, ``budget.seconds``),
    converted and checked by the model's rules as a file's or a variable's value is (``--seed -1`` and
    ``--budget-seconds nan`` are refused like ``KBUILD_SEED=-1``): a :class:`ConfigError` naming the flag
    otherwise. None (the flag was not given) stays None."""
    if value is None:
        return None
    cls: Any = Settings
    *parents, last = name.split(".")
    for part in parents:
        cls = type_hints(cls)[part]
    f = cls.__dataclass_fields__[last]
    conv = Converter(COMMAND_LINE)
    converted = conv.convert(value, type_hints(cls)[last], flag)
    check = f.metadata.get("check")
    if check is not None:
        check(converted, conv, flag)
    return converted


def apply_flag(settings: Settings, path: str, value: Any, *, flag: str) -> Settings:
    """``settings`` with the setting at the dotted ``path`` (``"prewarm.lease_seconds"``) replaced by the
    command-line ``flag``'s ``value`` (or a library function's argument), held to the model's rules by
    :func:`flag_setting`; None (not given) leaves ``settings`` unchanged."""
    if value is None:
        return settings
    return _replace_at(settings, tuple(path.split(".")), flag_setting(path, value, flag))


def apply_flags(settings: Settings, **flags: Any) -> Settings:
    """The last source, command-line flags: every flag that was given (not None) replaces its setting, whatever
    the environment and ``pyproject.toml`` say (``kbuild emit --locked`` → ``apply_flags(s, locked=True)``)."""
    given = {name: value for name, value in flags.items() if value is not None}
    return dataclasses.replace(settings, **given) if given else settings


__all__ = ["CONFIG_SETTINGS_PREFIX", "MAX_PYPROJECT_BYTES", "apply_flag", "apply_flags", "flag_setting", "load_settings",
           "read_pyproject", "settings_from_table"]
