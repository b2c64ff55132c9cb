"""Names and digests that end in a newline are refused (or quoted) everywhere the store checks a name with a
regular expression: ``re.match`` with ``$`` also matches before a final ``"\\n"``, so ``"0\\n"`` passed as a bare
TOML key and broke the lock file it was written to (found by hypothesis in ``test_any_names_round_trip``), and a
digest followed by a newline passed :func:`is_digest`. Each check now matches the whole string."""

from __future__ import annotations

import tarfile

import pytest
from store_helpers import make_key

from kbuild.cache import StoreUsageError
from kbuild.cache.bundle import BundleError, _check_member
from kbuild.cache.lock import LockEntry, format_lock, parse_lock
from kbuild.cache.record import is_digest


def test_a_digest_followed_by_a_newline_is_not_a_digest() -> None:
    digest = make_key("x")
    assert is_digest(digest) and not is_digest(digest + "\n") and not is_digest("\n" + digest)


@pytest.mark.parametrize("kernel", ["0\n", "a\n", "add\n\n", "k\r\n"])
def test_a_kernel_name_ending_in_a_newline_round_trips_through_the_lock_file(kernel: str) -> None:
    entries = [LockEntry(kernel, "sm_90", make_key(kernel), make_key("c" + kernel))]
    text = format_lock(entries)
    assert parse_lock(text) == entries and format_lock(parse_lock(text)) == text


def test_a_bundle_member_whose_name_ends_in_a_newline_is_refused() -> None:
    member = tarfile.TarInfo(f"ac/{make_key('x')}\n")
    member.size = 0
    with pytest.raises(BundleError, match="unexpected member"):
        _check_member("b.tar", member, set())
    ok = tarfile.TarInfo(f"ac/{make_key('x')}")
    _check_member("b.tar", ok, set())  # the same name without the newline is a member


def test_a_redis_prefix_ending_in_a_newline_is_refused() -> None:
    pytest.importorskip("redis")
    from kbuild.cache.redis_tier import RedisBackend

    with pytest.raises(StoreUsageError, match="prefix"):
        RedisBackend("redis://localhost:6379/0?prefix=kb%0A")
