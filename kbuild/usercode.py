"""Running code the user names: the one importer of a project's modules (kernels, bench specs, tile programs).

A module named in ``[tool.kbuild]`` or on the command line is the user's code, and importing or calling it
can raise anything, call ``sys.exit`` (a ``SystemExit``, which ``except Exception`` lets through: ``kbuild
compile --json`` then exited 0 with nothing on stdout) or recurse without end. :func:`import_module` and
:func:`call` turn every such outcome into one error of the caller's class (a
:class:`~kbuild.errors.KBuildError`, so the CLI prints one ``error:`` line) naming the module or function,
what it raised and the file and line it came from. ``KeyboardInterrupt`` (a person asked to stop) passes
unchanged, and so, from :func:`call`, do kbuild's own errors raised inside the user's code (a tile
operation's :class:`~kbuild.tile.lang.TileError` already names the program and the line); one raised while a
module is imported (a ``Scalar("int77")`` annotation) is named with the module and the line.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kbuild.errors import KBuildError

ErrorFactory = Callable[[str], Exception]


@contextlib.contextmanager
def on_path(paths: Sequence[str | os.PathLike[str]]) -> Iterator[None]:
    """``paths`` first on ``sys.path`` (those not there already) for the duration, then removed again."""
    added = [os.fspath(p) for p in paths if os.fspath(p) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for p in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(p)


def import_module(name: str, *, error: ErrorFactory, paths: Sequence[str | os.PathLike[str]] = (),
                  hint: str = "") -> types.ModuleType:
    """Import the user's module ``name`` (``paths`` first on ``sys.path``).

    A module that is not there is ``error("cannot import module 'name' (No module named ...)" + hint)``;
    anything its import raises (a ``SystemExit`` included) is ``error("importing 'name' raised ...")``."""
    with on_path(paths):
        try:
            return importlib.import_module(name)
        except KeyboardInterrupt:
            raise
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                raise error(f"cannot import module {name!r} ({exc}){hint}") from None
            raise error(f"importing {name!r} raised {describe(exc)}") from None
        except BaseException as exc:  # SystemExit, RecursionError, MemoryError, anything a module can raise
            raise error(f"importing {name!r} raised {describe(exc)}") from None


def call(fn: Callable[..., Any], *args: Any, error: ErrorFactory, what: str) -> Any:
    """``fn(*args)``, the user's function; anything it raises but kbuild's own errors and ``KeyboardInterrupt``
    is ``error(f"{what} raised ...")``."""
    try:
        return fn(*args)
    except (KeyboardInterrupt, KBuildError):
        raise
    except BaseException as exc:
        raise error(f"{what} raised {describe(exc)}") from None


def describe(exc: BaseException) -> str:
    """``ValueError: bad value (pkg/mod.py, line 3)``, on one line: the exception and the deepest frame of
    the user's code it passed through (not kbuild's, not the import machinery's)."""
    if isinstance(exc, SystemExit):
        text = f"SystemExit: sys.exit({exc.code!r}) was called; code kbuild runs must not exit"
    elif isinstance(exc, RecursionError):
        text = f"RecursionError: {_one_line(exc)} (a function that calls itself without end?)"
    else:
        text = f"{type(exc).__name__}: {_one_line(exc)}" if str(exc) else type(exc).__name__
    where = _origin(exc)
    return f"{text} ({where})" if where else text


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= limit else text[:limit] + "…"


def _origin(exc: BaseException) -> str | None:
    """``file, line N`` of the deepest traceback frame outside kbuild and the import machinery."""
    ours = tuple(os.path.abspath(d) + os.sep for name in ("kbuild", "kbuild.hooks", "kbuild.cache", "kbuild.templates")
                 for d in getattr(sys.modules.get(name), "__path__", ()))
    found = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<") and not os.path.abspath(filename).startswith(ours):
            found = (filename, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    filename, line = found
    try:
        shown = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        shown = filename
    if shown.startswith(".." + os.sep + ".."):
        shown = filename
    return f"{shown}, line {line}"


__all__ = ["call", "describe", "import_module", "on_path"]
