"""The process environment: kbuild's one reader (and writer) of ``os.environ``, and the one string-to-bool rule.

Nothing else in kbuild touches ``os.environ``. A ``KBUILD_*`` variable is a field of the settings model and is read
through it (:mod:`kbuild.settings.sources`, or :func:`kbuild.settings.variables.env_setting` for one field);
other programs' variables (Triton's, ``XDG_CACHE_HOME``, ``RAY_USE_TLS``) are read here with :func:`env_value`.
:func:`scoped` sets variables for a block and puts them back afterwards (the build's children, the tests'
override of settings).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from kbuild.errors import ENVIRONMENT, ConfigError


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Value of an environment variable, or None when unset or empty. The single access point.

    An empty variable counts as unset (``KBUILD_STORE=""`` means the pyproject value or the default, never
    the current directory), as the XDG base-directory spec asks of ``XDG_CACHE_HOME``.
    """
    value = (os.environ if environ is None else environ).get(name)
    return value if value not in (None, "") else None


def env_as_set(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value exactly as set (an empty one stays ``""``), None when unset: for the few readers that
    tell an empty value from an unset one (a secret that is set but empty is an error, not no secret)."""
    return (os.environ if environ is None else environ).get(name)


#: The one string-to-bool rule (:func:`parse_bool`): the environment, config settings, every boolean.
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(raw: str) -> bool | None:
    """``1``/``true``/``yes``/``on`` → True, ``0``/``false``/``no``/``off`` → False, in any case and with blanks
    around ignored; None for anything else, which the caller reports naming its variable or key."""
    word = raw.strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def bool_message(raw: str, also: tuple[str, ...] = ()) -> str:
    """What is wrong with ``raw`` where a boolean (or one of the words ``also``) was expected (:func:`parse_bool`
    gave None), for an error."""
    more = "".join(f" or {w!r}" for w in also)
    return f"expected a boolean ({', '.join(TRUE_WORDS)} or {', '.join(FALSE_WORDS)}, any case){more}, got {raw!r}"


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A boolean variable by :func:`parse_bool`: False when unset or empty, a :class:`ConfigError` naming the
    variable when it is neither true nor false."""
    value = env_value(name, environ)
    if value is None:
        return False
    flag = parse_bool(value)
    if flag is None:
        raise ConfigError(ENVIRONMENT, name, bool_message(value))
    return flag


def env_with_prefix(prefixes: tuple[str, ...], names: tuple[str, ...] = (),
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every variable whose name starts with one of ``prefixes`` or is one of ``names`` (set ones only,
    empty ones included: a tool may tell an empty value from an unset one), sorted by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(prefixes) or k in names}


def set_values(values: Mapping[str, str | None]) -> None:
    """Each variable of ``values`` set to its value (None: unset), in this process and the processes it starts."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def scoped(values: Mapping[str, str | None]) -> Iterator[None]:
    """Each variable of ``values`` set to its value (None: unset) while the block runs (:func:`set_values`);
    afterwards each is as it was before, whatever the block did to it."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        set_values(values)
        yield
    finally:
        set_values(saved)


__all__ = ["FALSE_WORDS", "TRUE_WORDS", "bool_message", "env_as_set", "env_flag", "env_value", "env_with_prefix",
           "parse_bool", "scoped", "set_values"]
