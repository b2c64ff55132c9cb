"""Every error kbuild reports to a person, with its exit status.

Each class says what happened; the message adds the likely cause and the next step. The CLI
prints ``error: <message>`` and exits with the class's ``exit_code``; tracebacks only with
``--debug`` (or ``KBUILD_DEBUG=1``). Library code raises these and never calls ``sys.exit``.

The exit statuses, one per condition (:class:`ExitCode`; each is introduced by one class below and
inherited by its subclasses):

====  ===============  ==========================================================================
code  name             condition
====  ===============  ==========================================================================
0     OK               success
1     FAILED           an error without a more specific code (:class:`KBuildError`); a command's
                       negative answer: ``kbuild cache get`` missed, ``kbuild cache verify`` left
                       problems, a kernel of ``kbuild bench`` failed, ``kbuild sass fuzz`` found one
2     USAGE            bad input: configuration, arguments, files, a store the user must fix, no
                       GPU of the needed architecture (:class:`UsageError`)
3     TOOL             Triton or an external tool (ptxas, nvdisasm, cmake) failed
                       (:class:`ToolchainError`)
4     STORE            the artefact store cannot be read or written, a remote tier is down under
                       ``--strict`` (:class:`StoreError`)
5     UNTUNED          ``tune = "require"`` and a kernel × target would ship untuned
                       (:class:`UntunedError`)
6     WHEEL_DIFFERS    ``kbuild verify-wheel``: the rebuilt wheel differs (an answer, no exception)
7     REJECTED         the SASS verifier rejected a rewritten cubin (:class:`VerificationError`)
8     MEASUREMENT      the GPU measurement worker cannot measure at all (:class:`MeasureError`)
====  ===============  ==========================================================================
"""

from __future__ import annotations

import enum
import json
import re
import shlex
from collections.abc import Sequence


class ExitCode(enum.IntEnum):
    """The process status of every kbuild command: the table in this module's docstring."""

    OK = 0
    FAILED = 1
    USAGE = 2
    TOOL = 3
    STORE = 4
    UNTUNED = 5
    WHEEL_DIFFERS = 6
    REJECTED = 7
    MEASUREMENT = 8


class KBuildError(Exception):
    """Base class. ``exit_code`` is the process status the CLI exits with.

    Every one pickles as it is (class, message and attributes, whatever its ``__init__`` takes), so that an error
    raised in another process (a compile process, a Ray task) reaches the CLI unchanged."""

    exit_code: ExitCode = ExitCode.FAILED

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[KBuildError], args: tuple[object, ...], state: dict[str, object]) -> KBuildError:
    """A pickled :class:`KBuildError` back, without calling its ``__init__`` (whose parameters differ per class)."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class UsageError(KBuildError):
    """Bad input from the user: configuration, arguments, files. Exit status 2."""

    exit_code = ExitCode.USAGE


#: ``ConfigError.where`` of a value from a ``KBUILD_*`` variable (``key`` is the variable), and of a command-line
#: flag (``key`` is the flag).
ENVIRONMENT = "environment"
COMMAND_LINE = "command line"


class ConfigError(UsageError):
    """A ``[tool.kbuild]`` value (or ``KBUILD_*`` variable, or flag) that is missing, mistyped or unknown.

    ``where`` is the file, :data:`ENVIRONMENT` or :data:`COMMAND_LINE`; ``key`` the dotted path inside the
    file (``[tool.kbuild.kernels][2].signature``), the variable (``KBUILD_TARGETS[1]``) or the flag
    (``--seed``). The message names each once: ``pyproject.toml: targets[1]: ...``, ``environment variable
    KBUILD_TUNE: ...``, ``--seed: ...``.
    """

    def __init__(self, where: str, key: str, message: str) -> None:
        self.where = where
        self.key = key
        self.detail = message
        place = (f"environment variable {key}" if where == ENVIRONMENT else key if where == COMMAND_LINE
                 else f"{where}: {key}")
        super().__init__(f"{place}: {message}")


def dotted_key(path: str, key: object) -> str:
    """``path.key``, the :attr:`ConfigError.key` of ``key`` below ``path``: a key that is not a bare TOML key is
    quoted as TOML does (``a."x y"``), with every non-printable character escaped, so that a message stays one line
    whatever the file holds."""
    text = str(key)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        quoted = json.dumps(text, ensure_ascii=False)
        text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                       for c in quoted)
    return f"{path}.{text}" if path else text


class KernelSourceError(ConfigError):
    """A kernel's ``source`` cannot be imported or is not a ``@triton.jit`` function."""


class MissingDependencyError(UsageError):
    """A required tool or package (Triton, nvdisasm, ...) is not installed."""


class ToolchainError(KBuildError):
    """Compiling failed: Triton (:class:`CompileError`) or an external tool (:class:`ToolError`). Exit status 3."""

    exit_code = ExitCode.TOOL


class ToolError(ToolchainError):
    """An external tool (ptxas, nvdisasm, cmake) failed. Shows the command, status, output and a repro line."""

    def __init__(self, what: str, cmd: Sequence[str], returncode: int, output: str) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.output = output
        body = "\n".join("    " + line for line in output.strip().splitlines()[-40:])
        super().__init__(
            f"{what} failed with status {returncode}\n  command: {shlex.join(self.cmd)}\n"
            f"  output:\n{body}\n  repro: {shlex.join(self.cmd)}"
        )


class CompileError(ToolchainError):
    """Triton failed to compile a kernel (the kernel's code, not kbuild's configuration)."""


class StoreError(KBuildError):
    """The artefact store cannot be read or written (unreadable path, full disk, remote down under --strict)."""

    exit_code = ExitCode.STORE


class ClusterUnreachableError(UsageError):
    """No Ray cluster answers at the address ``kbuild prewarm --ray`` was given (its name does not resolve, nothing
    listens, or what listens is not Ray), within the deadline: fix the address or start the cluster. Exit status 2."""


class GPUUnavailableError(UsageError):
    """A command needs a GPU of a given architecture that this machine does not have."""


class UntunedError(UsageError):
    """``tune = "require"`` and some kernel × target would ship untuned (each one listed). Exit status 5."""

    exit_code = ExitCode.UNTUNED


class VerificationError(KBuildError):
    """A rewritten cubin breaks a dependency of the original (or is not a rewrite of it). Exit status 7."""

    exit_code = ExitCode.REJECTED

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n".join(f"  - {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"rewritten cubin rejected by the verifier ({len(problems)} problem(s)):\n{shown}{more}")


class MeasureError(KBuildError):
    """The measurement worker cannot measure at all (its baseline fails, it cannot start). Exit status 8."""

    exit_code = ExitCode.MEASUREMENT


# --- the artefact store (kbuild.cache) -------------------------------------------------------------
class StoreUsageError(StoreError, UsageError):
    """A store problem the user can fix (bad URL, unusable directory, full disk, bad file). Exit status 2."""

    exit_code = ExitCode.USAGE


class StoreFullError(StoreUsageError):
    """The disk holding the local store is full; nothing was written."""


class StoreBusyError(StoreError):
    """Another process held the local store's write lock past the wait; nothing was written. Exit status 4."""


class TierUnavailableError(StoreError):
    """A remote tier did not answer, timed out or answered with an unexpected status."""


class LockFileError(StoreUsageError):
    """``kbuild.lock`` cannot be read or does not have the expected shape."""


class LockMismatchError(StoreUsageError):
    """``--locked``: the lock file and the project (or the store) disagree. ``problems`` lists each entry."""

    def __init__(self, lock_path: str, problems: Sequence[str]) -> None:
        self.lock_path = lock_path
        self.problems = list(problems)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"{lock_path}: {len(self.problems)} entr{'y' if len(self.problems) == 1 else 'ies'} missing or stale:\n"
            f"{body}\n  next step: run `kbuild lock` to update the lock file (on a machine whose store holds the artefacts)"
        )


class BundleError(StoreUsageError):
    """A file given to ``kbuild cache import`` is not a valid kbuild bundle; the store was not changed."""
