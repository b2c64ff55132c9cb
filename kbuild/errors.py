"""Every error kbuild reports to a person, with its exit status.

Each class says what happened; the message adds the likely cause and the next step. The CLI
prints ``error: <message>`` and exits with the class's ``exit_code``; tracebacks only with
``--debug`` (or ``KBUILD_DEBUG=1``). Library code raises these and never calls ``sys.exit``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


class KBuildError(Exception):
    """Base class. ``exit_code`` is the process status the CLI exits with."""

    exit_code = 1


class UsageError(KBuildError):
    """Bad input from the user: configuration, arguments, files. Exit status 2."""

    exit_code = 2


class ConfigError(UsageError):
    """A ``[tool.kbuild]`` value (or ``KBUILD_*`` variable) that is missing, mistyped or unknown.

    ``where`` is the file (or ``environment``), ``key`` the dotted path inside it, e.g.
    ``[tool.kbuild.kernels][2].signature``.
    """

    def __init__(self, where: str, key: str, message: str) -> None:
        self.where = where
        self.key = key
        self.detail = message
        super().__init__(f"{where}: {key}: {message}")


class KernelSourceError(ConfigError):
    """A kernel's ``source`` cannot be imported or is not a ``@triton.jit`` function."""


class MissingDependencyError(UsageError):
    """A required tool or package (Triton, nvdisasm, ...) is not installed."""


class ToolError(KBuildError):
    """An external tool (ptxas, nvdisasm, cmake) failed. Shows the command, status, output and a repro line."""

    exit_code = 3

    def __init__(self, what: str, cmd: Sequence[str], returncode: int, output: str) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.output = output
        body = "\n".join("    " + line for line in output.strip().splitlines()[-40:])
        super().__init__(
            f"{what} failed with status {returncode}\n  command: {shlex.join(self.cmd)}\n"
            f"  output:\n{body}\n  repro: {shlex.join(self.cmd)}"
        )


class CompileError(KBuildError):
    """Triton failed to compile a kernel (the kernel's code, not kbuild's configuration)."""

    exit_code = 3


class StoreError(KBuildError):
    """The artefact store cannot be read or written (unreadable path, full disk, remote down under --strict)."""

    exit_code = 4


class GPUUnavailableError(UsageError):
    """A command needs a GPU of a given architecture that this machine does not have."""


# --- the artefact store (kbuild.cache) -------------------------------------------------------------
class StoreUsageError(StoreError, UsageError):
    """A store problem the user can fix (bad URL, unusable directory, full disk, bad file). Exit status 2."""

    exit_code = 2


class StoreFullError(StoreUsageError):
    """The disk holding the local store is full; nothing was written."""


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
