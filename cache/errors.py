"""Errors raised by the artefact store.

They derive from :class:`kbuild.errors.StoreError` so that callers can catch every store
problem in one place. Problems caused by the user's input (a tier URL with an unknown scheme,
a store directory that cannot be used, a full disk, a lock file that does not parse, a bundle
that is not a bundle) are also :class:`kbuild.errors.UsageError` and exit with status 2.
"""

from __future__ import annotations

from collections.abc import Sequence

from kbuild.errors import StoreError, UsageError


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
