"""The per-kernel HTML tune report (issue 15, item 6): the SASS diff on real sm_90 cubins, the page's structure
and escaping (stdlib HTML parser), bad input, and the page as headless Chromium renders it (screenshot + DOM).

The shipped cubin here is made on the CPU with the SASS engine (legal moves and control-code edits, verified);
the figures in the report dicts are test inputs, labelled as the cost model's where the page must say so."""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbuild.errors import UsageError
from kbuild.sass.schedule import UP, Schedule
from kbuild.tune.measure.backend import GPU_BACKEND, MODEL_BACKEND
from kbuild.tune.report_html import (
    ESTIMATE_LABEL,
    _lis,
    chromium_render,
    find_chromium,
    render_report_html,
    sass_diff,
    write_report_html,
)

HOSTILE_KERNEL = 'mm<script>alert("x")</script>&amp;'


@dataclasses.dataclass
class Case:
    baseline: bytes
    shipped: bytes
    symbol: str
    schedule: Schedule  # the edited schedule: pos / stall / yield_ / reuse() say what the diff must show
    original: Schedule
    far_moved: int  # instruction moved up ``far_k`` slots in one far move
    far_k: int
    stall_edit: int
    yield_edit: int
    reuse_edit: int | None
    region: tuple[int, int]


@pytest.fixture(scope="module")
def case() -> Case:
    from kbuild.bench.kernels import SUITE
    from kbuild.bench.spec import compile_spec, load_spec
    from kbuild.tune.env import hot_region

    spec = load_spec(SUITE["matmul_leakyrelu_512x512x2048"], small=True)
    compiled = compile_spec(spec, spec.configs[0], 90)
    base = compiled.asm["cubin"]
    s = Schedule.from_cubin(base, compiled.metadata.name)
    lo, hi = hot_region(s)
    # one far move near the end of the region, then one one-slot move well before it
    far = next((t, s.reach(t, UP)) for t in range(hi - 1, lo, -1) if s.reach(t, UP) >= 3)
    far_moved = int(s.order[far[0]])
    s.apply_far(far[0], UP, far[1])
    one = next(t for t in range(lo + 5, far[0] - far[1] - 8) if s.is_legal(t, UP))
    s.apply(one, UP)
    untouched = [x for x in range(lo, hi) if s.pos[x] == x and s.stall[x] == s._orig_stall[x]]
    stall_x = next(x for x in untouched if s.why_edit_illegal(("stall", x, int(s.stall[x]) + 1)) is None)
    s.apply_edit(("stall", stall_x, int(s.stall[stall_x]) + 1))
    yield_x = next(x for x in untouched if x != stall_x
                   and s.why_edit_illegal(("yield", x, 1 - int(s.yield_[x]))) is None)
    s.apply_edit(("yield", yield_x, 1 - int(s.yield_[yield_x])))
    reuse_x = next((x for x in range(s.n) if s.reuse()[x] and s.pos[x] == x
                    and s.why_edit_illegal(("reuse", x, 0)) is None), None)
    if reuse_x is not None:
        s.apply_edit(("reuse", reuse_x, 0))
    shipped = s.to_cubin(verify=True, disassemble_check=True)
    return Case(base, shipped, compiled.metadata.name, s, Schedule.from_cubin(base, compiled.metadata.name),
                far_moved, far[1], stall_x, yield_x, reuse_x, (lo, hi))


def _report(**over: Any) -> dict[str, Any]:
    trials = [
        {"label": "BM128_w8", "status": "ok", "median_ms": 0.2, "rel_err": 1e-4, "autotune": True},
        {"label": "BM64_w4", "status": "ok", "median_ms": 0.1, "rel_err": 2e-4},
        {"label": "BN<256>&w4", "status": "wrong-result", "rel_err": 0.7, "error": "max rel err 0.7 > tol 0.01"},
        {"label": "BM256_s5", "status": "compile-error", "error": "out of resource: shared memory, 300000 > 232448"},
        {"label": "BM64_w8", "status": "ok", "median_ms": 0.15, "rel_err": 0.0, "autotune": True},
    ]
    report = {"kernel": "matmul_leakyrelu", "target": "sm_90", "gpu": None, "backend": MODEL_BACKEND,
              "config_label": "BM64_w4", "default_label": "BM128_w8", "evaluations": 42, "seconds": 3.5,
              "gains": {"level1": 1.5, "level2": 1.0, "total": 1.5, "final": None},
              "level1": {"trials": trials, "autotune_best_label": "BM64_w8", "autotune_best_ms": 0.15,
                         "gain": 1.5, "evaluations": 12, "method": "racing", "space_size": 48,
                         "backend": MODEL_BACKEND},
              "level2": {"BM64_w4": {"decision": {"accepted": False, "reason": "baseline kept: only the CPU cost "
                                                  "model judged this schedule"},
                                     "algorithms": {"greedy": {"best_ratio": 0.98, "evaluations": 30, "moves": 4}},
                                     "winner": "greedy", "backend": MODEL_BACKEND}}}
    report.update(over)
    return report


class Dom(HTMLParser):
    """Elements as (tag, attrs, text directly inside) and the document's text, from the stdlib parser."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.elements: list[dict[str, Any]] = []
        self.stack: list[dict[str, Any]] = []
        self.text: list[str] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = {"tag": tag, "attrs": dict(attrs), "text": "", "parents": [p["tag"] for p in self.stack]}
        self.elements.append(el)
        if tag not in ("meta", "img", "br", "link"):
            self.stack.append(el)

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        for el in self.stack:
            el["text"] += data

    def by_id(self, ident: str) -> dict[str, Any]:
        found = [e for e in self.elements if e["attrs"].get("id") == ident]
        assert len(found) == 1, f"{len(found)} elements with id {ident!r}"
        return found[0]

    def classes(self, el: dict[str, Any]) -> set[str]:
        return set((el["attrs"].get("class") or "").split())


# --- the diff --------------------------------------------------------------------------------------------
def test_diff_aligns_every_instruction_with_its_new_slot(case: Case):
    d = sass_diff(case.baseline, case.shipped, case.symbol)
    s, orig = case.schedule, case.original
    lefts = {r.left.index: r.left for r in d.rows if r.left is not None}
    rights = {r.right.index: r.right for r in d.rows if r.right is not None}
    assert sorted(lefts) == sorted(rights) == list(range(s.n))
    for x in range(s.n):
        assert lefts[x].partner == int(s.pos[x]), f"instruction {x} aligned with slot {lefts[x].partner}"
        assert rights[int(s.pos[x])].text == lefts[x].text
    # control-code marks are exactly where the engine changed a field
    for x in range(s.n):
        m = lefts[x].marks
        assert ("stall" in m) == (int(s.stall[x]) != int(orig.stall[x])), x
        assert ("yield" in m) == (bool(s.yield_[x]) != bool(orig.yield_[x])), x
        assert ("reuse" in m) == (int(s.reuse()[x]) != int(orig.reuse()[x])), x
        assert "barrier" not in m and "unmatched" not in m
    assert "stall" in lefts[case.stall_edit].marks and "yield" in lefts[case.yield_edit].marks
    if case.reuse_edit is not None:
        assert "reuse" in lefts[case.reuse_edit].marks
    # moved: the far-moved instruction (up far_k slots) and one of the swapped pair, nothing else
    moved = {x: m for x, side in lefts.items() for m in side.marks if m.startswith("moved")}
    assert moved.get(case.far_moved) == "moved-up"
    assert lefts[case.far_moved].partner == case.far_moved - case.far_k
    assert len(moved) == 2, moved
    assert d.counts["moved"] == 2 and d.counts["unmatched"] == 0
    # the hot region is the tuner's; rows inside it are flagged
    assert d.region == case.region and d.region_kind == "loop"
    assert all(r.hot == (case.region[0] <= r.left.index < case.region[1]) for r in d.rows if r.left is not None)
    assert d.stall_cycles is not None and d.stall_cycles[1] >= d.stall_cycles[0]  # moves only raise stalls


def test_identical_cubins_give_an_empty_diff(case: Case):
    d = sass_diff(case.baseline, case.baseline, case.symbol)
    assert d.identical and not any(d.counts.values())
    assert all(r.left is not None and r.right is not None and r.left.index == r.right.index for r in d.rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=40))
def test_lis_is_a_longest_increasing_subsequence(seq: list[int]):
    picked = sorted(_lis(seq))
    values = [seq[i] for i in picked]
    assert all(a < b for a, b in itertools.pairwise(values))
    best = [1] * len(seq)  # O(n²) reference
    for i in range(len(seq)):
        for j in range(i):
            if seq[j] < seq[i]:
                best[i] = max(best[i], best[j] + 1)
    assert len(picked) == max(best, default=0)


# --- the page --------------------------------------------------------------------------------------------
def test_page_marks_moves_and_edits_and_labels_the_estimate(case: Case, tmp_path: Path):
    out = write_report_html(_report(), case.baseline, case.shipped, tmp_path / "r.html", kernel_symbol=case.symbol)
    page = out.read_text()
    dom = Dom(page)
    assert not [e for e in dom.elements if e["tag"] in ("script", "link")]  # self-contained, no JS
    assert "http://" not in page and "https://" not in page
    s = case.schedule
    new = int(s.pos[case.far_moved])
    for ident, partner in ((f"b{case.far_moved}", f"#s{new}"), (f"s{new}", f"#b{case.far_moved}")):
        el = dom.by_id(ident)
        assert "moved-up" in dom.classes(el)
        links = [e for e in dom.elements if e["attrs"].get("href") == partner and "mv" in dom.classes(e)]
        assert links and links[0]["text"] == f"↑{case.far_k}"
    moved_rows = [e for e in dom.elements if dom.classes(e) & {"moved-up", "moved-down"}]
    assert len(moved_rows) == 4  # two moved instructions, each shown on both sides
    edited = dom.by_id(f"s{int(s.pos[case.stall_edit])}")
    stall_spans = [e for e in dom.elements if "c-stall" in dom.classes(e) and e["text"].startswith("S")]
    assert f"S{int(s.stall[case.stall_edit]):02d}" in {e["text"] for e in stall_spans}
    assert "edited: stall" in edited["attrs"]["title"]
    assert any("c-yield" in dom.classes(e) for e in dom.elements)
    # the cost model's label, the summary and the right column's honesty
    assert ESTIMATE_LABEL in dom.by_id("estimate")["text"]
    text = "".join(dom.text)
    assert "best candidate — NOT shipped" in text and "Wrong results shipped" in text
    assert "1.500×" in text and "hot region (loop)" in text
    # configuration table: ok rows sorted by time, the shipped one tagged, failures with their reasons
    rows = [e for e in dom.elements if e["tag"] == "tr" and "table" in e["parents"]]
    ok_rows = [r["text"] for r in rows if r["text"][:1].isdigit()]
    assert [t.split("BM")[1].split()[0][:5] for t in ok_rows] == ["64_w4", "64_w8", "128_w"]
    assert "ships" in ok_rows[0] and "autotune best" in ok_rows[1]
    assert "BN<256>&w4" in text and "max rel err 0.7 > tol 0.01" in text and "out of resource" in text
    assert "1 configuration(s) with wrong results rejected" in text
    # the list of moves says where the far-moved instruction went and which instructions it now precedes
    ins = case.original.analysis.instructions
    far_item = next(e["text"] for e in dom.elements if e["tag"] == "li" and ins[case.far_moved].text in e["text"])
    passed = ", ".join(ins[x].text.split()[0] for x in range(case.far_moved - case.far_k, case.far_moved))
    assert f"up {case.far_k} slot(s)" in far_item and f"now issued before {passed}" in far_item, far_item
    # folded runs of unchanged instructions
    folds = [e for e in dom.elements if e["tag"] == "details"]
    assert folds and all("unchanged instructions" in e["text"] for e in folds)


def test_page_escapes_names_and_sass_text(case: Case, monkeypatch: pytest.MonkeyPatch):
    import kbuild.sass.disasm as disasm

    real = disasm.disassemble

    def hostile_text(cubin, kernel):  # the first instruction's opcode gets markup characters (test fake)
        ins = real(cubin, kernel)
        return [dataclasses.replace(ins[0], opcode="LDG.<b>&x</b>"), *ins[1:]]

    monkeypatch.setattr(disasm, "disassemble", hostile_text)
    report = _report(kernel=HOSTILE_KERNEL, config_label="<i>cfg</i>")
    page = render_report_html(report, case.baseline, case.shipped, kernel_symbol=case.symbol)
    dom = Dom(page)
    assert not [e for e in dom.elements if e["tag"] in ("script", "b", "i")]
    text = "".join(dom.text)
    assert HOSTILE_KERNEL in text and "<i>cfg</i>" in text and "LDG.<b>&x</b>" in text
    assert "&lt;script&gt;" in page and "&amp;amp;" in page


def test_accepted_gpu_result_shows_ci_and_aa_spread_without_the_estimate_label(case: Case):
    decision = {"accepted": True, "reason": "accepted: 1.031× (95% CI 1.020–1.042×), A/A spread 0.40%",
                "speedup": 1.031, "speedup_ci": [1.020, 1.042], "aa_spread": 0.004, "checks": 10}
    level1 = dict(_report()["level1"], backend=GPU_BACKEND)
    report = _report(backend=GPU_BACKEND, gpu="NVIDIA H200", level1=level1,
                     level2={"BM64_w4": {"decision": decision, "backend": GPU_BACKEND,
                                         "region": {"start": case.region[0], "end": case.region[1], "kind": "loop"}},
                             "BM64_w8": {"decision": {"accepted": False, "reason": "other config"}}},
                     gains={"level1": 1.5, "level2": 1.031, "total": 1.5466},
                     final={"speedup": 1.52, "speedup_ci": [1.50, 1.54], "aa_ratio": 1.001, "aa_ci": [0.997, 1.002]})
    page = render_report_html(report, case.baseline, case.shipped, kernel_symbol=case.symbol)
    dom = Dom(page)
    text = "".join(dom.text)
    assert ESTIMATE_LABEL not in text and not [e for e in dom.elements if e["attrs"].get("id") == "estimate"]
    assert "1.031× (95% CI 1.020–1.042×, A/A spread 0.40%)" in text
    assert "1.520× (95% CI 1.500–1.540×, A/A spread 0.30%)" in text and "1.547×" in text
    assert "shipped schedule (tuned)" in text and "bit-exact on 10 input sets" in text and "NVIDIA H200" in text


def test_peers_are_shown_beside_what_ships(case: Case):
    """The peers a user would call instead: each timed one with its ratio and interval, its output check, an
    unavailable one with torch's reason, and a report whose peers could not be timed saying why."""
    peers = {"kernel_ms": 0.0123, "rounds": 8, "reps": 10, "peers": [
        {"label": "torch_rms_norm", "name": "F.rms_norm", "available": True, "agrees": True,
         "rel_err": {"Y_ptr": 1.5e-3}, "median_ms": 0.0246, "ratio": 2.0, "ratio_ci": [1.9, 2.1]},
        {"label": "torch_composite", "name": "F.silu(a) · b", "available": True, "agrees": False,
         "rel_err": {"c_ptr": 0.5}, "median_ms": 0.01, "ratio": 0.813, "ratio_ci": [0.8, 0.83]},
        {"label": "sdpa_cudnn", "name": "SDPA cuDNN", "available": False, "reason": "RuntimeError: <no> cuDNN"}]}
    page = render_report_html(_report(backend=GPU_BACKEND, peers=peers), case.baseline, case.shipped,
                              kernel_symbol=case.symbol)
    dom = Dom(page)
    text = "".join(dom.text)
    assert "Peers: what a user would call instead" in text and "0.0123 ms (median)" in text
    assert "2.000×" in text and "1.900–2.100×" in text and "agrees (max rel. error 1.50e-03)" in text
    assert "DIFFERS (max rel. error 5.00e-01)" in text and "0.813×" in text
    assert "unavailable: RuntimeError: <no> cuDNN" in text and "&lt;no&gt;" in page
    assert [e for e in dom.elements if e["attrs"].get("id") == "peertable"]
    failed = render_report_html(_report(peers={"error": "fault: illegal address"}), case.baseline, case.shipped,
                                kernel_symbol=case.symbol)
    assert "Peers not timed: fault: illegal address" in "".join(Dom(failed).text)
    plain = render_report_html(_report(), case.baseline, case.shipped, kernel_symbol=case.symbol)
    assert "Peers" not in "".join(Dom(plain).text)  # a kernel without peers: no section


def test_the_search_curves_are_drawn_from_the_report(case: Case):
    """The build's reports (KBUILD_REPORTS) have no learning-curve image: the page draws both searches from the
    report itself, as inline SVG (no script): level 1's best time so far over the autotune best, in the order the
    configurations were measured, and each level-2 algorithm's curve."""
    from kbuild.tune.report_html import level1_curve

    l2 = {"BM64_w4": {"decision": {"accepted": False, "reason": "kept"}, "backend": MODEL_BACKEND,
                      "algorithms": {"greedy": {"best_ratio": 0.97, "curve": [[1, 1.0], [5, 0.98], [30, 0.97]]},
                                     "<ppo>": {"best_ratio": 0.99, "curve": [[2, "x"], [3, float("nan")], [4, 0.99],
                                                                             [1], None]}}}}
    report = _report(level2=l2)
    curve = level1_curve(report["level1"])
    assert [x for x, _ in curve] == [1, 2, 3, 4, 5]
    assert [y for _, y in curve] == pytest.approx([0.2 / 0.15] + [0.1 / 0.15] * 4)
    page = render_report_html(report, case.baseline, case.shipped, kernel_symbol=case.symbol)
    dom = Dom(page)
    svgs = {e["attrs"].get("id"): e for e in dom.elements if e["tag"] == "svg"}
    assert set(svgs) == {"curve1", "curve2"} and not [e for e in dom.elements if e["tag"] == "script"]
    lines = {e["attrs"]["data-name"]: e["attrs"]["points"] for e in dom.elements if e["tag"] == "polyline"}
    assert set(lines) == {"configurations", "greedy", "<ppo>"} and "&lt;ppo&gt;" in page
    assert len(lines["greedy"].split()) == 5 and len(lines["configurations"].split()) == 9  # steps: 2 per point
    assert len(lines["<ppo>"].split()) == 2  # one usable point of five, held to the last evaluation
    text = "".join(dom.text)
    assert "configurations 0.667" in text and "greedy 0.970" in text and "evaluations" in text
    with_png = render_report_html(report, case.baseline, case.shipped, kernel_symbol=case.symbol,
                                  curve_png=_tiny_png())
    ids = {e["attrs"].get("id") for e in Dom(with_png).elements if e["tag"] == "svg"}
    assert ids == {"curve1"}  # the CLI's image stands for level 2's
    empty = render_report_html(_report(level1={}, level2={}), case.baseline, case.shipped, kernel_symbol=case.symbol)
    assert "<svg" not in empty


def test_cost_model_never_claims_an_output_check(case: Case):
    """On the cost model nothing runs: the page must not say the shipped configuration matched the reference."""
    report = _report()
    for t in report["level1"]["trials"]:
        t["rel_err"] = None
    text = "".join(Dom(render_report_html(report, case.baseline, case.shipped, kernel_symbol=case.symbol)).text)
    assert "not checked — " + ESTIMATE_LABEL in text and "matched the reference" not in text
    gpu = _report(backend=GPU_BACKEND, level1=dict(report["level1"], backend=GPU_BACKEND), level2={})
    text = "".join(Dom(render_report_html(gpu, case.baseline, case.shipped, kernel_symbol=case.symbol)).text)
    assert "0 — the shipped configuration matched the reference" in text and "not checked" not in text


def test_learning_curve_is_inlined(case: Case):
    png = _tiny_png()
    page = render_report_html(_report(), case.baseline, case.baseline, kernel_symbol=case.symbol, curve_png=png)
    imgs = [e for e in Dom(page).elements if e["tag"] == "img"]
    assert len(imgs) == 1 and imgs[0]["attrs"]["src"].startswith("data:image/png;base64,")
    assert "shipped schedule (= untouched)" in page and "0 moved, 0 stall" in page


@pytest.mark.parametrize(("bad", "key"), [
    pytest.param({"kernel": None}, "'kernel'", id="no-kernel",
                 marks=pytest.mark.hostile(fault="malformed tune report", outcome="clean error")),
    pytest.param({"level1": {"trials": "all of them"}}, "'trials'", id="trials-not-a-list",
                 marks=pytest.mark.hostile(fault="malformed tune report", outcome="clean error")),
    pytest.param({"level1": {"trials": [{"status": "ok"}]}}, "'trials'[0]", id="trial-without-label",
                 marks=pytest.mark.hostile(fault="malformed tune report", outcome="clean error")),
    pytest.param({"gains": [1.0]}, "'gains'", id="gains-not-a-dict",
                 marks=pytest.mark.hostile(fault="malformed tune report", outcome="clean error")),
])
def test_bad_report_is_a_usage_error_and_writes_nothing(case: Case, tmp_path: Path, bad: dict, key: str):
    dest = tmp_path / "r.html"
    with pytest.raises(UsageError, match=key.replace("[", r"\[").replace("]", r"\]")):
        write_report_html(_report(**bad), case.baseline, case.shipped, dest, kernel_symbol=case.symbol)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.hostile(fault="not a cubin", outcome="clean error")
def test_bad_cubin_or_image_is_a_usage_error(case: Case, tmp_path: Path):
    with pytest.raises(UsageError, match="not a cubin"):
        write_report_html(_report(), case.baseline, b"\x7fELF" + b"\0" * 100, tmp_path / "r.html")
    with pytest.raises(UsageError, match="no kernel named"):
        write_report_html(_report(), case.baseline, case.shipped, tmp_path / "r.html", kernel_symbol="nope")
    with pytest.raises(UsageError, match="curve_png"):
        write_report_html(_report(), case.baseline, case.shipped, tmp_path / "r.html", curve_png=b"GIF89a")
    assert list(tmp_path.iterdir()) == []


# --- headless Chromium -----------------------------------------------------------------------------------
def _need_chromium() -> None:
    if find_chromium() is None:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            pytest.fail("chromium is missing although we run as root: scripts/test installs it (apt-get install chromium)")
        pytest.skip("headless Chromium not installed and not root (apt-get install chromium; CI installs it)")


def _tiny_png() -> bytes:
    raw = b"".join(b"\0" + bytes([x * 60, 255 - x * 60, 0]) * 4 for x in range(4))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def png_size_and_colours(data: bytes) -> tuple[tuple[int, int], int]:
    """Width × height and the number of distinct colours (PIL when installed, else distinct scanlines)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    try:
        from PIL import Image
    except ImportError:  # stdlib fallback: a blank page's filtered scanlines are all alike
        idat, pos = b"", 8
        while pos < len(data):
            (n,) = struct.unpack(">I", data[pos:pos + 4])
            if data[pos + 4:pos + 8] == b"IDAT":
                idat += data[pos + 8:pos + 8 + n]
            pos += 12 + n
        raw = zlib.decompress(idat)
        stride = len(raw) // height
        return (width, height), len({raw[k * stride:(k + 1) * stride] for k in range(height)})
    import io

    with Image.open(io.BytesIO(data)) as im:
        im.load()
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
        return im.size, len(colours) if colours is not None else 1 << 20


def test_headless_chromium_renders_the_report(case: Case, tmp_path: Path):
    _need_chromium()
    page = write_report_html(_report(kernel=HOSTILE_KERNEL), case.baseline, case.shipped, tmp_path / "r.html",
                             kernel_symbol=case.symbol, curve_png=_tiny_png())
    png = tmp_path / "shot.png"
    dom = chromium_render(page, png=png, size=(1400, 2000))
    parsed = Dom(dom)
    assert not [e for e in parsed.elements if e["tag"] == "script"]
    assert ESTIMATE_LABEL in parsed.by_id("estimate")["text"]
    assert parsed.by_id("legend") and parsed.by_id("sassdiff")
    assert HOSTILE_KERNEL in "".join(parsed.text)
    s = case.schedule
    assert "moved-up" in parsed.classes(parsed.by_id(f"s{int(s.pos[case.far_moved])}"))
    assert len([e for e in parsed.elements if parsed.classes(e) & {"moved-up", "moved-down"}]) == 4
    size, colours = png_size_and_colours(png.read_bytes())
    assert size == (1400, 2000)
    assert colours > 20, f"screenshot looks blank ({colours} colours)"
