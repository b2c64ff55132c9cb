"""kbuild.lock: stable TOML, strict parsing, and --locked checks that list every problem."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import make_artefact, make_key

from kbuild.cache.local import LocalBackend
from kbuild.cache.lock import (
    LockEntry,
    LockKey,
    check_lock,
    format_lock,
    parse_lock,
    read_lock,
    update_lock,
    write_lock,
)
from kbuild.cache.tier import Tier
from kbuild.errors import LockFileError, LockMismatchError


def entry(kernel, target, seed=None):
    return LockEntry(kernel, target, make_key(f"k-{kernel}-{target}-{seed}"), make_key(f"c-{kernel}-{target}-{seed}"))


def test_write_is_sorted_stable_and_round_trips(tmp_path):
    entries = [entry("zeta", "sm_90"), entry("alpha", "sm_90a"), entry("alpha", "sm_80")]
    text = write_lock(tmp_path / "kbuild.lock", entries)
    assert read_lock(tmp_path / "kbuild.lock") == sorted(entries)
    assert write_lock(tmp_path / "again.lock", list(reversed(entries))) == text
    assert (tmp_path / "kbuild.lock").read_bytes() == (tmp_path / "again.lock").read_bytes()
    tables = [line for line in text.splitlines() if line.startswith("[")]
    assert tables == ["[kernels.alpha.sm_80]", "[kernels.alpha.sm_90a]", "[kernels.zeta.sm_90]"]
    assert text.startswith("# kbuild.lock") and "version = 1" in text


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.tuples(st.text(min_size=1, max_size=12), st.sampled_from(["sm_80", "sm_90", "sm_90a", "sm 9.0"])),
                       st.integers(0, 10**6), max_size=6))
def test_any_names_round_trip(pins):
    entries = [LockEntry(k, t, make_key(f"{k}{t}{v}"), make_key(f"c{v}")) for (k, t), v in pins.items()]
    text = format_lock(entries)
    assert parse_lock(text) == sorted(entries)
    assert format_lock(parse_lock(text)) == text


@pytest.mark.parametrize("text, match", [
    ("version = 1\n[kernels.a.sm_90\n", "not valid TOML"),
    ("version = 2\n", "version"),
    ("[kernels.a.sm_90]\nkey = 'x'\n", "version"),
    ("version = 1\n[kernels.a.sm_90]\nkey = 'abc'\ncubin_sha256 = 'abc'\n", r"kernels\.a\.sm_90\.key"),
    ("version = 1\n[kernels.a.sm_90]\nkey = '" + "a" * 64 + "'\n", r"kernels\.a\.sm_90\.cubin_sha256"),
    ("version = 1\nextra = 3\n", "extra"),
])
def test_unparseable_lock_files(tmp_path, text, match):
    path = tmp_path / "kbuild.lock"
    path.write_text(text)
    with pytest.raises(LockFileError, match=match) as info:
        read_lock(path)
    assert info.value.exit_code == 2 and str(path) in str(info.value)


def test_missing_lock_file(tmp_path):
    with pytest.raises(LockFileError, match="no such lock file"):
        read_lock(tmp_path / "kbuild.lock")


def test_update_and_check(tmp_path):
    tier = Tier(LocalBackend(tmp_path / "s"))
    a90, a80, b90 = (make_artefact(n) for n in ("add-90", "add-80", "mul-90"))
    for art in (a90, a80, b90):
        tier.put(art)
    expected = [LockKey("add", "sm_90", a90.key), LockKey("add", "sm_80", a80.key), ("mul", "sm_90", b90.key)]
    lock = tmp_path / "kbuild.lock"
    update = update_lock(lock, expected, tier)
    assert update.added == ["add/sm_80", "add/sm_90", "mul/sm_90"] and not update.changed and not update.removed
    pinned = check_lock(expected, tier, lock=lock)
    assert pinned[("add", "sm_90")] == a90 and pinned[("mul", "sm_90")] == b90
    text = lock.read_text()
    update_lock(lock, expected, tier)
    assert lock.read_text() == text  # idempotent


def test_check_lists_every_missing_or_stale_entry(tmp_path):
    tier = Tier(LocalBackend(tmp_path / "s"))
    arts = {n: make_artefact(n) for n in ("a", "b", "c", "d")}
    for art in arts.values():
        tier.put(art)
    lock = tmp_path / "kbuild.lock"
    write_lock(lock, [
        LockEntry("a", "sm_90", arts["a"].key, arts["a"].cubin_sha256),          # fine
        LockEntry("b", "sm_90", arts["b"].key, arts["b"].cubin_sha256),          # key now differs: stale
        LockEntry("c", "sm_90", make_key("gone"), make_key("gone-cubin")),       # not in the store
        LockEntry("d", "sm_90", arts["d"].key, make_key("other cubin")),         # digest differs
        LockEntry("old", "sm_80", arts["a"].key, arts["a"].cubin_sha256),        # no longer in the project
    ])
    expected = [("a", "sm_90", arts["a"].key), ("b", "sm_90", make_key("new b")), ("c", "sm_90", make_key("gone")),
                ("d", "sm_90", arts["d"].key), ("e", "sm_90", make_key("e"))]
    with pytest.raises(LockMismatchError) as info:
        check_lock(expected, tier, lock=lock)
    err = info.value
    assert err.exit_code == 2
    assert len(err.problems) == 5
    msg = str(err)
    for needle in ("b / sm_90: stale", "c / sm_90: pinned key", "d / sm_90: stale: the store's cubin",
                   "e / sm_90: missing from the lock file", "old / sm_80: stale: pinned in the lock file"):
        assert needle in msg
    assert "a / sm_90" not in msg
    assert "kbuild lock" in msg


def test_update_fails_listing_all_missing_and_writes_nothing(tmp_path):
    tier = Tier(LocalBackend(tmp_path / "s"))
    lock = tmp_path / "kbuild.lock"
    with pytest.raises(LockMismatchError) as info:
        update_lock(lock, [("x", "sm_90", make_key("x")), ("y", "sm_80", make_key("y"))], tier)
    assert len(info.value.problems) == 2
    assert not lock.exists()


def test_check_with_entries_names_the_given_file(tmp_path):
    tier = Tier(LocalBackend(tmp_path / "s"))
    with pytest.raises(LockMismatchError) as info:
        check_lock([("k", "sm_90", make_key("k"))], tier, lock=[], where="proj/kbuild.lock")
    assert str(info.value).startswith("proj/kbuild.lock: 1 entry missing or stale")
