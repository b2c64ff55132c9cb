"""The ``KBUILD_*`` variables: one per field of the settings model that has one (its ``env`` metadata).

The environment beats ``pyproject.toml`` (:mod:`kbuild.settings.sources` overlays every variable that is set, with
:func:`env_field`). Code that runs without a project (the CLI before it reads one, the external tools, the run-time
hook) asks :func:`env_setting` for one field. :func:`variables` lists every variable the model knows, and
:class:`Override` sets settings through them for a block and puts every one back afterwards (Triton's
``knobs.scope()`` for kbuild: the tests' isolation and their settings).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kbuild.errors import ENVIRONMENT, ConfigError

from .environ import env_as_set, env_value, set_values
from .fields import Converter, from_string, type_hints
from .model import Settings


def env_field(f: dataclasses.Field[Any], tp: Any, environ: Mapping[str, str] | None) -> tuple[bool, Any]:
    """(whether its variable is set, the converted and checked value) for one field with ``env`` metadata."""
    var = f.metadata.get("env")
    if not var:
        return False, None
    raw = env_value(var, environ)
    as_set = env_as_set(var, environ)
    if f.metadata.get("secret") and as_set is not None and as_set.strip() == "":
        # a secret that is set but empty (a CI secret missing on forks) must not turn signing off silently
        raise ConfigError(ENVIRONMENT, var, "is set but empty; set it to the shared secret, "
                          "or unset it to work without signed records")
    if raw is None:
        return False, None
    conv = Converter(ENVIRONMENT)
    value = from_string(raw, tp, conv, var)
    check = f.metadata.get("check")
    if check is not None:
        check(value, conv, var)
    return True, value


def env_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The field ``name`` of :class:`Settings` from the environment alone, converted and checked by the model's
    rules (its default when the variable is unset or empty): for code that runs without a project, such as the
    CLI before it reads one (``debug``), the external tools (``ptxas``, ``nvdisasm``, ``cuobjdump``) and the
    run-time hook (``runtime``). A bad value is a :class:`ConfigError` naming the variable."""
    f = Settings.__dataclass_fields__[name]
    found, value = env_field(f, type_hints(Settings)[name], environ)
    if found:
        return value
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def env_var(name: str) -> str:
    """The environment variable of the :class:`Settings` field ``name`` (``nvcc_records`` → ``KBUILD_NVCC_RECORDS``),
    for code that sets it for the processes it starts (a build's compilers); reading it goes through
    :func:`env_setting`."""
    return str(Settings.__dataclass_fields__[name].metadata["env"])


def env_raw(*names: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, ...]:
    """The raw values of the variables of the :class:`Settings` fields ``names`` (None where unset): a cheap
    memo key for code asked on every call, such as a kernel launch, whether its settings changed."""
    return tuple(env_as_set(env_var(n), environ) for n in names)


@functools.cache
def variables() -> dict[str, str]:
    """Every ``KBUILD_*`` variable of the model by its field's dotted name (``budget.evaluations`` →
    ``KBUILD_BUDGET_EVALUATIONS``), in the model's order: read from the fields' metadata, never kept by hand."""
    out: dict[str, str] = {}

    def walk(cls: Any, above: str) -> None:
        hints = type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{above}{f.name}.")
            elif f.metadata.get("env"):
                out[above + f.name] = str(f.metadata["env"])

    walk(Settings, "")
    return out


def _as_text(value: Any) -> str | None:
    """A value as its variable holds it: None unset, a boolean ``1``/``0``, a list comma-separated, else ``str``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, (str, int, float, Path)):
        return str(value)
    raise TypeError(f"a setting's variable holds a string, a number, a boolean, a path or a list, not "
                    f"{type(value).__name__} {value!r}")


class Override:
    """Settings set through their ``KBUILD_*`` variables while a block runs; afterwards every variable of the model
    (:func:`variables`) is as it was before, whatever the block did to it::

        with Override(clear=True) as env:       # every KBUILD_* variable of the model unset
            env.set(store=tmp_path, tune="off")
            env.set({"budget.evaluations": 30})  # a field of a table by its dotted name
            env.set(runtime=None)                # unset again
            ...

    ``clear``: unset every variable of the model first (a test then sees the model's defaults and its pyproject,
    not the shell's variables). Values are written as the variable would hold them (a boolean ``1``/``0``, a list
    comma-separated, a path as text; a string as it is, so that a test may set a value the model refuses) and read
    back by the model's rules, as a user's variable is: a bad one is the error that names the variable. The
    variables are in ``os.environ``, so the processes the block starts see them too."""

    def __init__(self, values: Mapping[str, Any] | None = None, /, *, clear: bool = False, **fields: Any) -> None:
        self.clear = clear
        self.initial = {**(values or {}), **fields}
        self._saved: dict[str, str | None] | None = None

    def __enter__(self) -> Override:
        self._saved = {var: env_as_set(var) for var in variables().values()}
        if self.clear:
            set_values(dict.fromkeys(self._saved))
        try:
            self.set(self.initial)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            set_values(self._saved)
            self._saved = None

    def set(self, values: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        """Set the settings ``values`` (dotted names) and ``fields`` (top-level names) through their variables; None
        unsets one. A name the model has no variable for is a ``KeyError`` naming the closest one."""
        if self._saved is None:
            raise RuntimeError("Override.set outside its with block")
        known = variables()
        given = {**(values or {}), **fields}
        for name in given:
            if name not in known:
                hint = difflib.get_close_matches(name, list(known), n=1)
                raise KeyError(f"no KBUILD_* variable for the setting {name!r}"
                               + (f"; did you mean {hint[0]!r}?" if hint else ""))
        set_values({known[name]: _as_text(value) for name, value in given.items()})


__all__ = ["Override", "env_field", "env_raw", "env_setting", "env_var", "variables"]
