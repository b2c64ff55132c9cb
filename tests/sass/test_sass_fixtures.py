"""The engine on real Triton 3.6 cubins (sm_80 and sm_90): decoding, mask agreement, the verifier, and
the fuzz gate (≥1,000 random legal sequences per kernel, 0 mismatches)."""

from __future__ import annotations

import numpy as np
import pytest
from sass_synth import CUBINS, FIXTURES

from kbuild.sass import DOWN, UP, Cubin, IllegalMove, Schedule, Verifier, control, disassemble
from kbuild.sass.fuzz import fuzz, random_walk

IDS = [p.stem for p in CUBINS]


def test_fixture_set_is_complete():
    names = {p.stem for p in CUBINS}
    for k in ("matmul_leaky", "matmul_async", "softmax", "layernorm", "rmsnorm", "attention_fwd"):
        assert f"{k}.sm80" in names and f"{k}.sm90" in names
    assert "tma_matmul.sm90" in names
    tma = (FIXTURES / "tma_matmul.sm90.txt").read_text()
    assert "HGMMA" in tma and "UTMALDG" in tma
    assert "LDGSTS" in (FIXTURES / "matmul_async.sm80.txt").read_text()


@pytest.mark.parametrize("path", CUBINS, ids=IDS)
def test_disassembly_matches_committed_text(path):
    cubin = Cubin(path.read_bytes(), str(path))
    ins = disassemble(cubin, cubin.default_kernel(None))
    got = "".join(f"{16 * x.index:05x} {x.text}\n" for x in ins)
    assert got == path.with_suffix(".txt").read_text()
    assert len(ins) == cubin.text(cubin.default_kernel(None)).size // 16


@pytest.mark.parametrize("path", [FIXTURES / "attention_fwd.sm80.cubin", FIXTURES / "tma_matmul.sm90.cubin",
                                  FIXTURES / "layernorm.sm90.cubin"], ids=lambda p: p.stem)
def test_mask_agrees_with_the_exact_check(path, fixture_schedule):
    s = fixture_schedule(path)
    rng = np.random.default_rng(7)
    for step in range(25):
        mask = s.legal_moves()
        for t in range(s.n):
            for d in (UP, DOWN):
                assert mask[t, d] == s.is_legal(t, d), (step, t, d, s.why_illegal(t, d))
        s.apply_action(int(rng.choice(np.flatnonzero(mask.reshape(-1)))))
    while s.moves:
        s.undo()
    assert np.array_equal(s.order, np.arange(s.n))
    assert np.array_equal(s.stall, s._orig_stall) and not s.reuse_cleared.any()


def test_illegal_move_names_offsets_and_rule(fixture_schedule):
    s = fixture_schedule(FIXTURES / "softmax.sm90.cubin")
    mask = s.legal_moves()
    t = int(np.flatnonzero(~mask[1:, UP])[0]) + 1
    with pytest.raises(IllegalMove, match=r"0x[0-9a-f]+ .*(pinned|registers|block|scoreboard|distance|memory)"):
        s.apply(t, UP)


def _swap_words(data: bytes, text_off: int, i: int) -> bytes:
    b = bytearray(data)
    a = slice(text_off + 16 * i, text_off + 16 * i + 16)
    c = slice(text_off + 16 * (i + 1), text_off + 16 * (i + 2))
    b[a], b[c] = data[c], data[a]
    return bytes(b)


def test_verifier_rejects_bad_rewrites(fixture_schedule):
    path = FIXTURES / "attention_fwd.sm80.cubin"
    s = fixture_schedule(path)
    v = Verifier(s.analysis, s.cubin)
    orig = s.cubin.data
    assert v.check(orig, disassemble_check=True) == []
    text = s.cubin.text(s.kernel)
    an = s.analysis
    # swap two adjacent instructions of one block that share a register
    i = next(k for k in range(an.n - 1) if an.block_of[k] == an.block_of[k + 1] and not an.sems[k].pinned
             and not an.sems[k + 1].pinned and an.sems[k].writes & an.sems[k + 1].reads)
    assert any("order" in p for p in v.check(_swap_words(orig, text.offset, i)))
    # lower a stall
    k = next(k for k in range(an.n) if an.sems[k].stall > 1)
    w = control.with_stall(an.words[k], 0)
    bad = bytearray(orig)
    bad[text.offset + 16 * k: text.offset + 16 * k + 16] = w.to_bytes(16, "little")
    assert any("lowered" in p for p in v.check(bytes(bad)))
    # change a byte outside the text
    bad = bytearray(orig)
    bad[0x40] ^= 1
    assert v.check(bytes(bad))
    # a pinned instruction that moves
    k = next(k for k in range(an.n - 1) if an.sems[k].pinned and an.block_of[k] == an.block_of[k + 1]
             and not an.sems[k + 1].pinned)
    assert v.check(_swap_words(orig, text.offset, k))


def test_nvinfo_offsets_are_remapped_and_checked(fixture_schedule):
    s = fixture_schedule(FIXTURES / "attention_fwd.sm80.cubin")
    an = s.analysis
    off, _attr = next((o, a) for o, a in an.offset_records if a == 0x28)
    x = int.from_bytes(s.cubin.data[off:off + 4], "little") // 16
    mask = s.legal_moves()
    d = UP if mask[x, UP] else DOWN
    assert mask[x, d], "the SHFL named by COOP_GROUP_INSTR_OFFSETS should be movable"
    s.apply(x, d)
    data = s.to_cubin(verify=True)
    assert int.from_bytes(data[off:off + 4], "little") == 16 * int(s.pos[x])
    stale = bytearray(data)
    stale[off:off + 4] = s.cubin.data[off:off + 4]
    assert any("nv.info" in p for p in Verifier(an, s.cubin).check(bytes(stale)))


def test_write_is_atomic_and_nothing_is_written_on_failure(tmp_path, fixture_schedule, monkeypatch):
    from kbuild.sass import verify

    s = fixture_schedule(FIXTURES / "softmax.sm80.cubin")
    random_walk(s, 5, np.random.default_rng(1))
    out = tmp_path / "k.cubin"
    s.write(out)
    assert Verifier(s.analysis, s.cubin).check(out.read_bytes()) == []
    monkeypatch.setattr(verify.Verifier, "check", lambda self, data, **kw: ["forced failure"])
    out2 = tmp_path / "k2.cubin"
    with pytest.raises(verify.VerificationError):
        s.write(out2)
    assert not out2.exists() and list(tmp_path.iterdir()) == [out]


@pytest.mark.parametrize("path", CUBINS, ids=IDS)
def test_fuzz_1000_sequences(path, fixture_schedule):
    s = fixture_schedule(path)
    res = fuzz(s, sequences=1000, max_depth=48, seed=20261202, full_checks=1)
    assert res["mismatches"] == 0, res["examples"]
    assert res["verifier_rejections"] == 0, res["examples"]
    assert res["verified"] == 1000
    assert res["moves"] > 1000


def test_schedule_from_bytes_and_diff():
    data = (FIXTURES / "rmsnorm.sm90.cubin").read_bytes()
    s = Schedule.from_cubin(data)
    random_walk(s, 3, np.random.default_rng(0))
    text = s.diff()
    assert "3 move(s)" in text and "was 0x" in text
