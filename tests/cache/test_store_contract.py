"""One contract suite that every backend (local diskcache, HTTP/nginx, Redis) passes, through a Tier."""

from __future__ import annotations

import json
import logging

import pytest
from store_helpers import make_artefact, make_key

from kbuild.cache.record import Artefact
from kbuild.cache.store import Backend, Store
from kbuild.cache.tier import Tier
from kbuild.errors import StoreError, StoreUsageError


def test_backend_and_tier_implement_the_protocols(case):
    assert isinstance(case.backend, Backend)
    assert isinstance(case.tier(), Store)


def test_every_backend_has_a_transaction(case):
    """``transaction()`` is part of the protocol (issue 14): every backend has one and a tier uses it as is
    (the local lock, a no-op for the remotes) instead of looking for it with ``getattr``."""
    art = make_artefact("tx", size=10)
    with case.backend.transaction():
        case.backend.put_blob(art.cubin_sha256, art.cubin)
        assert case.backend.put_record(art.key, art.record())
    assert case.tier().get(art.key) == art


def test_a_backend_without_a_transaction_is_no_backend():
    class NoTransaction:
        location = "nowhere"

    for name in ("get_record", "get_blob", "has_record", "has_blob", "put_blob", "put_record", "delete_record",
                 "delete_blob", "record_keys", "close"):
        setattr(NoTransaction, name, lambda self, *a, **k: None)
    assert not isinstance(NoTransaction(), Backend)
    NoTransaction.transaction = lambda self: None  # type: ignore[attr-defined]
    assert isinstance(NoTransaction(), Backend)


def test_miss_on_empty(case):
    tier = case.tier()
    key = make_key("absent")
    assert tier.get(key) is None
    assert not tier.contains(key)
    assert list(tier.keys()) == []
    assert tier.stats.tier(tier.name).misses == 1


def test_put_get_round_trip(case):
    tier = case.tier()
    art = make_artefact("roundtrip", size=5000)
    tier.put(art)
    got = tier.get(art.key)
    assert got == art
    assert got.cubin == art.cubin and got.meta == art.meta
    assert tier.contains(art.key)
    assert list(tier.keys()) == [art.key]
    s = tier.stats.tier(tier.name)
    assert (s.hits, s.puts) == (1, 1)
    assert tier.stats.time_saved_seconds == pytest.approx(2.0)


@pytest.mark.parametrize("size", [0, 1, 2 * 2**20 + 3])
def test_sizes(case, size):
    tier = case.tier()
    art = make_artefact(f"size{size}", size=size)
    tier.put(art)
    assert tier.get(art.key) == art


def test_entries_list_metadata(case):
    tier = case.tier()
    arts = [make_artefact(f"e{i}", size=100 + i) for i in range(5)]
    for a in arts:
        tier.put(a)
    infos = {e.key: e for e in tier.entries()}
    assert set(infos) == {a.key for a in arts}
    for a in arts:
        assert infos[a.key].cubin_sha256 == a.cubin_sha256
        assert infos[a.key].cubin_size == a.size
        assert infos[a.key].meta == a.meta
    assert sorted(tier.keys()) == sorted(a.key for a in arts)


def test_delete(case):
    tier = case.tier()
    art = make_artefact("del")
    tier.put(art)
    assert tier.delete(art.key) is True
    assert tier.get(art.key) is None
    assert not tier.contains(art.key)
    assert tier.delete(art.key) is False
    tier.put(art)  # a deleted key can be stored again
    assert tier.get(art.key) == art


def test_entries_are_immutable_first_writer_wins(case, caplog):
    tier = case.tier()
    first = make_artefact("imm", size=300)
    other = Artefact.create(key=first.key, cubin=b"different bytes", meta={"target": "sm_90"})
    tier.put(first)
    with caplog.at_level(logging.WARNING):
        tier.put(other)
    assert tier.get(first.key) == first
    assert tier.stats.tier(tier.name).conflicts == 1
    assert "different cubin" in caplog.text
    tier.put(first)  # identical put: a no-op, no conflict
    assert tier.stats.tier(tier.name).conflicts == 1


def test_flipped_byte_in_blob_is_detected_deleted_and_reported(case, caplog):
    tier = case.tier()
    art = make_artefact("flip", size=4096)
    tier.put(art)
    damaged = bytearray(art.cubin)
    damaged[1234] ^= 0x01
    case.corrupt_blob(art.cubin_sha256, bytes(damaged))
    with caplog.at_level(logging.WARNING):
        assert tier.get(art.key) is None
    assert "corrupt entry" in caplog.text and art.key in caplog.text
    assert tier.stats.tier(tier.name).corrupt == 1
    assert not tier.contains(art.key)
    assert not case.backend.has_blob(art.cubin_sha256)
    tier.put(art)  # and the next put repairs it
    assert tier.get(art.key) == art


def test_damaged_records_are_misses(case):
    tier = case.tier()
    a, b = make_artefact("rec-a"), make_artefact("rec-b")
    tier.put(a)
    tier.put(b)
    case.plant_record(a.key, b"{not json")
    assert tier.get(a.key) is None
    # b's record copied under a's key: the record names another key
    case.plant_record(a.key, case.backend.get_record(b.key))
    assert tier.get(a.key) is None
    # metadata edited without updating its digest
    rec = json.loads(case.backend.get_record(b.key))
    rec["meta"]["tuned"] = True
    case.plant_record(b.key, json.dumps(rec).encode())
    assert tier.get(b.key) is None
    assert tier.stats.tier(tier.name).corrupt == 3


def test_record_without_blob_is_a_miss(case):
    tier = case.tier()
    art = make_artefact("dangling")
    tier.put(art)
    case.backend.delete_blob(art.cubin_sha256)
    assert tier.get(art.key) is None
    assert tier.stats.tier(tier.name).corrupt == 0
    tier.put(art)
    assert tier.get(art.key) == art


def test_poisoning_unsigned_or_wrongly_signed_records_rejected(case, caplog):
    secret = "s3cret"
    tier = case.tier(secret=secret)
    good = make_artefact("signed")
    tier.put(good)
    assert json.loads(case.backend.get_record(good.key))["signature"].startswith("hmac-sha256:")
    assert tier.get(good.key) == good

    planted = make_artefact("planted")
    case.corrupt_blob(planted.cubin_sha256, planted.cubin)
    case.plant_record(planted.key, planted.record(None))  # unsigned
    with caplog.at_level(logging.WARNING):
        assert tier.get(planted.key) is None
    assert "not signed" in caplog.text
    case.plant_record(planted.key, planted.record("wrong secret"))
    assert tier.get(planted.key) is None
    assert tier.stats.tier(tier.name).rejected == 2
    # the same records read fine without a secret, so it is the signature that was refused
    assert Tier(case.backend).get(planted.key) == planted


def test_verify_and_fix(case):
    tier = case.tier()
    good, bad = make_artefact("v-good"), make_artefact("v-bad")
    tier.put(good)
    tier.put(bad)
    case.corrupt_blob(bad.cubin_sha256, bad.cubin[:-1] + b"X")
    checked, problems = tier.verify()
    assert checked == 2
    assert [(p.key, p.fixed) for p in problems] == [(bad.key, False)]
    checked, problems = tier.verify(fix=True)
    assert [(p.key, p.fixed) for p in problems] == [(bad.key, True)]
    checked, problems = tier.verify()
    assert (checked, problems) == (1, [])
    assert tier.get(good.key) == good


def test_read_only_tier_refuses_writes_and_keeps_corrupt_data(case):
    writer = case.tier()
    art = make_artefact("ro")
    writer.put(art)
    reader = case.tier(writable=False)
    assert reader.get(art.key) == art
    with pytest.raises(StoreError, match="read-only"):
        reader.put(make_artefact("ro2"))
    with pytest.raises(StoreError, match="read-only"):
        reader.delete(art.key)
    case.corrupt_blob(art.cubin_sha256, b"garbage")
    assert reader.get(art.key) is None
    assert case.backend.has_record(art.key)  # a read-only tier is reported, not modified


def test_invalid_keys_are_usage_errors(case):
    tier = case.tier()
    for bad in ("", "ABC", "../" + "0" * 61, make_key("x").upper()):
        with pytest.raises(StoreUsageError) as info:
            tier.get(bad)
        assert info.value.exit_code == 2


# ----------------------------------------------------------------------------------------------
# A name holding something no kbuild writes (issue 32, item 4): a Redis list, a WebDAV collection, a pickled
# local row where a record ("ac") or a cubin ("cas") belongs. A miss for that key alone, never the tier down;
# repaired by the next writer and by verify --fix.

hostile = pytest.mark.hostile
WHERE = pytest.mark.parametrize("where", ["ac", "cas"], ids=["record", "cubin"])


def _stored_with_one_bad(case, where: str, n: int = 6) -> list[Artefact]:
    """``n`` signed entries in the tier; the first one's record or cubin then replaced by no value at all."""
    writer = case.tier(secret="s")
    arts = [make_artefact(f"nv-{where}-{i}") for i in range(n)]
    for a in arts:
        writer.put(a)
    case.plant_no_value(where, arts[0].key if where == "ac" else arts[0].cubin_sha256)
    return arts


@hostile(fault="key holding no value", outcome="degraded with warning")
@WHERE
def test_a_name_holding_no_value_is_a_miss_for_that_key_alone(case, caplog, where):
    from kbuild.cache.tiered import TieredStore

    arts = _stored_with_one_bad(case, where)
    bad = arts[0]
    # a reader of the shared tier (read-only for it, as on CI), the bad key read first
    reader = TieredStore([case.tier(secret="s", writable=False, name="shared")], local=False)
    with caplog.at_level(logging.WARNING):
        got = [reader.get(a.key) for a in arts]
    assert got == [None, *arts[1:]]  # 5 of 6: one miss, the tier stays up
    assert "unavailable" not in caplog.text and bad.key in caplog.text, caplog.text
    assert not (case.backend.has_record(bad.key) if where == "ac" else case.backend.has_blob(bad.cubin_sha256))


@hostile(fault="key holding no value", outcome="served correct bytes")
@WHERE
def test_the_next_writer_replaces_a_name_holding_no_value(case, where):
    arts = _stored_with_one_bad(case, where, n=1)
    case.tier(secret="s").put(arts[0])  # another machine writes the same entry
    assert case.tier(secret="s", writable=False).get(arts[0].key) == arts[0]


@hostile(fault="key holding no value", outcome="degraded with warning")
@WHERE
def test_verify_fix_removes_a_name_holding_no_value(case, where):
    arts = _stored_with_one_bad(case, where, n=2)
    tier = case.tier(secret="s")
    checked, problems = tier.verify()
    assert checked == 2 and [(p.key, p.fixed) for p in problems] == [(arts[0].key, False)], problems
    _, problems = tier.verify(fix=True)
    assert [(p.key, p.fixed) for p in problems] == [(arts[0].key, True)]
    assert tier.verify() == (1, [])
    tier.put(arts[0])
    assert tier.get(arts[0].key) == arts[0]
