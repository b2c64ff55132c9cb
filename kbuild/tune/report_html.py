"""The explainable tune report: one self-contained HTML page per kernel × target (issue 15, item 6).

This module owns the page, the side-by-side SASS diff and the search curves on it (inline SVG drawn from the
report: level 1's best time so far, each level-2 algorithm's curve; the CLI's matplotlib image replaces level
2's). :func:`write_report_html` takes the tune report as a plain dict plus two cubins, and writes one HTML file
(inline CSS, no script, images as ``data:`` URIs or inline SVG) atomically. :func:`sass_diff` aligns the two schedules by instruction identity;
:func:`find_chromium` and :func:`chromium_render` drive headless Chromium (screenshots and the rendered
DOM, for tests and the committed example).

The report dict
---------------

Every key is optional except ``kernel``; missing figures show as "—". The shape is that of
:meth:`kbuild.tune.two_level.TwoLevelResult.report` with two additions (``gpu``, ``estimate``):

=============================== =====================================================================
key                             meaning
=============================== =====================================================================
``kernel``                      kernel name (str, required)
``target``                      e.g. ``"sm_90"``
``gpu``                         the GPU the figures were measured on (str or None)
``backend``                     measurement backend label; a cost-model label (``"cost-model ..."``,
                                anything naming an "estimate") marks the whole page
                                **CPU estimate, not a measurement**
``estimate``                    bool: force that label (e.g. level 1 on the cost model)
``config_label``                the configuration that ships (else ``level1.chosen`` / ``best_label``)
``default_label``               the configuration that ships untuned
``gains``                       ``{level1, level2, total, final}``: speedups (× faster, > 1 is better)
``final``                       ``{speedup, speedup_ci, aa_ratio, aa_ci, ...}`` (or ``aa_spread``): the
                                side-by-side re-timing against the autotune best; ``{error}``; or None
``evaluations``, ``seconds``    budget used
``level1``                      ``{trials: [...], chosen, best_label, autotune_best_label, autotune_best_ms,
                                gain, evaluations, method, space_size, backend}``; each trial
                                ``{label, status, median_ms, rel_err, error, autotune}`` with status
                                ``ok``, ``compile-error``, ``launch-error``, ``wrong-result``, ``racy`` (a wgmma
                                register race: never timed) or ``timeout``
``level2``                      one SASS search report (:meth:`kbuild.tune.api.TuneResult.report`:
                                ``decision {accepted, reason, speedup, speedup_ci, aa_spread, checks}``,
                                ``algorithms {name: {best_ratio, confirmed_ratio, evaluations, ...}}``,
                                ``winner``, ``region {start, end, kind}``, ``backend``), or a dict of
                                configuration label → such a report (the chosen label's is shown)
``space``                       a space derived for a recorded kernel and pruned on the CPU
                                (:func:`kbuild.build.tuning._pruned_space`): dimensions, counts, pruned points
``peers``                       the torch calls a user would make instead, timed interleaved with what
                                ships (:func:`kbuild.bench.peers.time_beside_peers`): ``{kernel_ms, rounds, reps,
                                peers: [{label, name, available, agrees, rel_err, median_ms, ratio,
                                ratio_ci}]}``; ``{not_timed, peers}`` on the cost model; ``{error}``
=============================== =====================================================================

The SASS diff
-------------

The two cubins are the chosen configuration's untouched cubin and what ships (or, when the baseline is
kept, the best candidate, labelled as not shipped). Instructions are matched by their word without the
control code (k-th occurrence to k-th occurrence), then by disassembled text. The longest run of matched
instructions that kept their relative order is the anchor; every other matched instruction is **moved**
(shown at its old place on the left and its new place on the right). Control-code edits (stall, yield,
reuse flags, scoreboards) are marked per field. The hot region (where the search moved instructions) is
highlighted, and long runs of unchanged instructions fold into ``<details>``.
"""

from __future__ import annotations

import base64
import html
import math
import os
import shutil
import subprocess
import tempfile
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from kbuild.errors import MissingDependencyError, ToolError, UsageError
from kbuild.fsutil import write_atomic

ESTIMATE_LABEL = "CPU estimate, not a measurement"
CONTEXT = 3
"""Unchanged instructions shown on each side of a change before the rest folds away."""
MIN_FOLD = 6
"""Runs of unchanged instructions shorter than this stay unfolded."""
CONTROL_FIELDS = ("stall", "yield", "reuse", "barrier")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_STATUS_ORDER = {"ok": 0, "wrong-result": 1, "racy": 2, "launch-error": 3, "timeout": 4, "compile-error": 5}


# --- the SASS diff ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    """One instruction on one side of the diff."""

    index: int
    """Slot in its own cubin (offset = 16 × index)."""
    text: str
    ctl: Any
    """Its :class:`kbuild.sass.control.Control`."""
    partner: int | None
    """Its slot on the other side (None: no counterpart)."""
    marks: frozenset[str]
    """``moved-up``/``moved-down``, ``unmatched``, and the edited control fields (:data:`CONTROL_FIELDS`)."""


@dataclass(frozen=True)
class Row:
    left: Side | None
    right: Side | None
    hot: bool

    @property
    def changed(self) -> bool:
        return any(s is not None and s.marks for s in (self.left, self.right))


@dataclass
class SassDiff:
    kernel: str
    rows: list[Row]
    baseline_n: int
    shipped_n: int
    region: tuple[int, int] | None
    region_kind: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    """``moved``, ``stall``, ``yield``, ``reuse``, ``barrier``, ``unmatched``: instructions with each mark."""
    stall_cycles: tuple[int, int] | None = None
    """Sum of stall fields in the hot region, baseline and shipped (a static count, not a timing)."""

    @property
    def identical(self) -> bool:
        return not any(r.changed for r in self.rows)


def _kernel_words(data: bytes, kernel: str | None, what: str) -> tuple[Any, str, list[int]]:
    from kbuild.sass import control, elf

    cubin = elf.Cubin(data, what)
    kernel = cubin.default_kernel(kernel)
    sec = cubin.text(kernel)
    return cubin, kernel, control.words_from_bytes(cubin.section_bytes(sec))


def _lis(seq: Sequence[int]) -> set[int]:
    """Positions in ``seq`` of one longest strictly increasing subsequence (patience sorting)."""
    tails: list[int] = []
    tail_pos: list[int] = []
    prev = [-1] * len(seq)
    for i, v in enumerate(seq):
        k = bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_pos.append(i)
        else:
            tails[k], tail_pos[k] = v, i
        prev[i] = tail_pos[k - 1] if k else -1
    out: set[int] = set()
    i = tail_pos[-1] if tail_pos else -1
    while i >= 0:
        out.add(i)
        i = prev[i]
    return out


def _control_marks(a: Any, b: Any) -> set[str]:
    marks = set()
    if a.stall != b.stall:
        marks.add("stall")
    if a.yield_ != b.yield_:
        marks.add("yield")
    if a.reuse != b.reuse:
        marks.add("reuse")
    if (a.wbar, a.rbar, a.wait) != (b.wbar, b.rbar, b.wait):
        marks.add("barrier")
    return marks


def sass_diff(baseline_cubin: bytes, shipped_cubin: bytes, kernel_symbol: str | None = None, *,
              region: tuple[int, int] | None = None, region_kind: str | None = None) -> SassDiff:
    """Align ``shipped_cubin``'s instructions of ``kernel_symbol`` with ``baseline_cubin``'s (see the module
    docstring). ``region`` is the hot region in baseline slots; None: the tuner's own
    (:func:`kbuild.tune.env.hot_region`). UsageError when a cubin is not one or lacks the kernel."""
    from kbuild.sass import control
    from kbuild.sass.disasm import disassemble

    bcubin, kernel, bwords = _kernel_words(baseline_cubin, kernel_symbol, "baseline cubin")
    scubin, _, swords = _kernel_words(shipped_cubin, kernel, "shipped cubin")
    btext = [i.text for i in disassemble(bcubin, kernel)]
    stext = btext if baseline_cubin == shipped_cubin else [i.text for i in disassemble(scubin, kernel)]
    if region is None:
        region, region_kind = _hot_region(baseline_cubin, kernel)

    # match by body (k-th occurrence to k-th occurrence), then by text
    by_body: dict[int, deque[int]] = defaultdict(deque)
    for i, w in enumerate(bwords):
        by_body[control.body(w)].append(i)
    s2b: dict[int, int] = {}
    for j, w in enumerate(swords):
        q = by_body.get(control.body(w))
        if q:
            s2b[j] = q.popleft()
    left_over = {i for q in by_body.values() for i in q}
    by_text: dict[str, deque[int]] = defaultdict(deque)
    for i in sorted(left_over):
        by_text[btext[i]].append(i)
    for j in range(len(swords)):
        if j not in s2b and by_text.get(stext[j]):
            s2b[j] = by_text[stext[j]].popleft()
    b2s = {b: s for s, b in s2b.items()}

    matched = sorted(s2b)
    anchored_pos = _lis([s2b[j] for j in matched])
    anchors = [(s2b[matched[k]], matched[k]) for k in sorted(anchored_pos)]
    anchored_b = {b for b, _ in anchors}

    bctl = [control.decode(w) for w in bwords]
    sctl = [control.decode(w) for w in swords]

    def marks_b(i: int) -> frozenset[str]:
        if i not in b2s:
            return frozenset({"unmatched"})
        m = _control_marks(bctl[i], sctl[b2s[i]])
        if i not in anchored_b:
            m.add("moved-up" if b2s[i] < i else "moved-down")
        return frozenset(m)

    def marks_s(j: int) -> frozenset[str]:
        if j not in s2b:
            return frozenset({"unmatched"})
        return marks_b(s2b[j]) - {"unmatched"}

    def left(i: int) -> Side:
        return Side(i, btext[i], bctl[i], b2s.get(i), marks_b(i))

    def right(j: int) -> Side:
        return Side(j, stext[j], sctl[j], s2b.get(j), marks_s(j))

    def is_hot(i: int | None) -> bool:
        return region is not None and i is not None and region[0] <= i < region[1]

    rows: list[Row] = []
    pb = ps = -1
    for b, s in [*anchors, (len(bwords), len(swords))]:
        for i, j in zip_longest(range(pb + 1, b), range(ps + 1, s)):
            lside = left(i) if i is not None else None
            rside = right(j) if j is not None else None
            hot = is_hot(i) or is_hot(s2b.get(j) if j is not None else None)
            rows.append(Row(lside, rside, hot))
        if b < len(bwords):
            rows.append(Row(left(b), right(s), is_hot(b)))
        pb, ps = b, s

    counts = dict.fromkeys(("moved", *CONTROL_FIELDS, "unmatched"), 0)
    for i in range(len(bwords)):
        m = marks_b(i)
        counts["moved"] += bool(m & {"moved-up", "moved-down"})
        for f in (*CONTROL_FIELDS, "unmatched"):
            counts[f] += f in m
    counts["unmatched"] += len(swords) - len(s2b)
    cycles = None
    if region is not None:
        lo, hi = region
        shipped_slots = [b2s[i] for i in range(lo, min(hi, len(bwords))) if i in b2s]
        cycles = (sum(bctl[i].stall for i in range(lo, min(hi, len(bwords)))),
                  sum(sctl[j].stall for j in shipped_slots))
    return SassDiff(kernel, rows, len(bwords), len(swords), region, region_kind, counts, cycles)


def _hot_region(cubin: bytes, kernel: str) -> tuple[tuple[int, int] | None, str | None]:
    """The tuner's hot region of the baseline (None when the engine cannot analyse this kernel)."""
    from kbuild.errors import KBuildError
    from kbuild.sass.schedule import Schedule
    from kbuild.tune.env import hot_region, region_kind

    try:
        schedule = Schedule.from_cubin(cubin, kernel)
    except (KBuildError, ValueError, KeyError):
        return None, None
    region = hot_region(schedule)
    return region, region_kind(schedule, region)


# --- reading the report dict -------------------------------------------------------------------------------
def _get(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = d.get(key)
    if value is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise UsageError(f"tune report: key {where}{key!r} must be {names}, got {type(value).__name__}")
    return value


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _level2(report: Mapping[str, Any], chosen: str | None) -> Mapping[str, Any] | None:
    l2 = _get(report, "level2", dict, "")
    if not l2:
        return None
    if "decision" in l2 or "algorithms" in l2:
        return l2
    pick = l2.get(chosen) if chosen is not None else None
    if pick is None and len(l2) == 1:
        pick = next(iter(l2.values()))
    if pick is not None and not isinstance(pick, dict):
        raise UsageError(f"tune report: key 'level2'[{chosen!r}] must be dict, got {type(pick).__name__}")
    return pick


def is_estimate(report: Mapping[str, Any]) -> bool:
    """Whether any figure of the report comes from the CPU cost model (the page then says so everywhere)."""
    if report.get("estimate") is True:
        return True
    labels = [report.get("backend")]
    for key in ("level1", "level2"):
        sub = report.get(key)
        if isinstance(sub, dict):
            labels.append(sub.get("backend"))
            labels.extend(v.get("backend") for v in sub.values() if isinstance(v, dict))
    return any(isinstance(b, str) and ("cost-model" in b or "estimate" in b.lower()) for b in labels)


# --- HTML ---------------------------------------------------------------------------------------------------
def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _x(v: Any, digits: int = 3) -> str:
    f = _num(v)
    return "—" if f is None else f"{f:.{digits}f}×"


def _ms(v: Any) -> str:
    f = _num(v)
    return "—" if f is None else f"{f:.4g}"


def _pct(v: Any) -> str:
    f = _num(v)
    return "—" if f is None else f"{f:.2%}"


def _ci(v: Any) -> str:
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(_num(x) is not None for x in v):
        return f"{float(v[0]):.3f}–{float(v[1]):.3f}×"
    return "—"


_CSS = """
:root{--moved:#cfe3ff;--moved-b:#2b6cd4;--stall:#ffe08a;--yield:#e3c8ff;--reuse:#c3f0c8;--barrier:#ffc4c4;
--hot:#ff9f1c;--unm:#ddd;--est:#b45309}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em 2em;color:#1d2330;background:#fff}
h1{font-size:1.45em;margin:.2em 0}h2{font-size:1.15em;margin:1.4em 0 .5em;border-bottom:1px solid #ccd}
code,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
.estimate{background:#fff4e5;border:2px solid var(--est);color:#7c2d12;padding:.5em .8em;margin:.6em 0;
font-weight:600}
.summary{display:grid;grid-template-columns:max-content 1fr;gap:.25em 1.2em;background:#f6f8fb;padding:.8em 1em;
border-radius:6px}
.summary dt{font-weight:600}.summary dd{margin:0}
.big{font-size:1.2em;font-weight:700}.ok{color:#13794b}.bad{color:#b42318}.muted{color:#667}
table{border-collapse:collapse;margin:.3em 0}th,td{padding:.2em .6em;border-bottom:1px solid #e4e7ee;
text-align:left}th{background:#eef1f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.chosen td{background:#e7f7ee;font-weight:600}tr.atbest td{background:#f3f6ff}
.tag{display:inline-block;font-size:11px;padding:0 .4em;border-radius:3px;margin-left:.3em;background:#dde3ee}
.tag.ship{background:#13794b;color:#fff}.tag.at{background:#2b6cd4;color:#fff}
.legend span.sw{display:inline-block;padding:0 .5em;margin:0 .6em .2em 0;border-radius:3px}
.diffhead,.r{display:grid;grid-template-columns:1fr 1fr;column-gap:6px}
.diffhead div{font-weight:700;padding:.2em .4em;background:#eef1f6}
.s{display:grid;grid-template-columns:6.5ch 24ch 1fr 7ch;font-family:"DejaVu Sans Mono",Menlo,monospace;
font-size:11.5px;line-height:1.5;white-space:pre;overflow:hidden;border-left:4px solid transparent;padding-left:2px}
.s>span{overflow:hidden;text-overflow:ellipsis}.s>span:nth-child(3){white-space:pre-wrap;overflow-wrap:anywhere}
.r.hot .s{border-left-color:var(--hot)}
.s.blank{background:repeating-linear-gradient(45deg,#fafafa,#fafafa 4px,#f0f0f0 4px,#f0f0f0 8px)}
.s.moved-up,.s.moved-down{background:var(--moved)}.s .mv{color:var(--moved-b);font-weight:700}
.s.unmatched{background:var(--unm)}
.c-stall{background:var(--stall)}.c-yield{background:var(--yield)}.c-reuse{background:var(--reuse)}
.c-barrier{background:var(--barrier)}
.s a{color:inherit}
details.fold>summary{cursor:pointer;color:#556;font-style:italic;padding:.1em .5em;background:#f6f7f9;
font-size:12px}
.moves li{margin:.15em 0}
img.curve{max-width:640px;border:1px solid #dde}
svg.curve{display:block;margin:.5em 0;border:1px solid #dde;background:#fff}
"""


def _ctl_html(ctl: Any, marks: frozenset[str]) -> str:
    from kbuild.sass.control import NO_BARRIER

    wait = "".join(str(k) for k in range(6) if ctl.wait >> k & 1) or "-"
    rb = "-" if ctl.rbar == NO_BARRIER else str(ctl.rbar)
    wb = "-" if ctl.wbar == NO_BARRIER else str(ctl.wbar)
    bar = f"B{wait}:R{rb}:W{wb}"
    y = "Y" if ctl.yield_ else "-"

    def f(name: str, text: str) -> str:
        return f'<span class="c-{name}">{_e(text)}</span>' if name in marks else _e(text)

    return f"[{f('barrier', bar)}:{f('yield', y)}:{f('stall', f'S{ctl.stall:02d}')}:{f('reuse', f'U{ctl.reuse:x}')}]"


def _side_html(s: Side | None, prefix: str, other: str) -> str:
    if s is None:
        return '<div class="s blank"><span></span><span></span><span></span><span></span></div>'
    cls = " ".join(sorted(m for m in s.marks if m in ("moved-up", "moved-down", "unmatched")))
    title = []
    mv = ""
    if "moved-up" in s.marks or "moved-down" in s.marks:
        assert s.partner is not None
        dist = abs(s.partner - s.index)
        arrow = "↑" if "moved-up" in s.marks else "↓"
        mv = f'<a class="mv" href="#{other}{s.partner}">{arrow}{dist}</a>'
        title.append(f"moved {'up' if arrow == '↑' else 'down'} {dist} slot(s); other side at 0x{16 * s.partner:04x}")
    edits = sorted(m for m in s.marks if m in CONTROL_FIELDS)
    if edits:
        title.append("edited: " + ", ".join(edits))
    if "unmatched" in s.marks:
        title.append("no counterpart on the other side")
    t = f' title="{_e("; ".join(title))}"' if title else ""
    return (f'<div class="s {cls}" id="{prefix}{s.index}"{t}><span>{16 * s.index:04x}</span>'
            f"<span>{_ctl_html(s.ctl, s.marks)}</span><span>{_e(s.text)}</span><span>{mv}</span></div>")


def _row_html(r: Row) -> str:
    cls = "r hot" if r.hot else "r"
    return f'<div class="{cls}">{_side_html(r.left, "b", "s")}{_side_html(r.right, "s", "b")}</div>'


def _diff_rows_html(d: SassDiff) -> str:
    n = len(d.rows)
    keep = [False] * n
    for k, r in enumerate(d.rows):
        if r.changed:
            for t in range(max(0, k - CONTEXT), min(n, k + CONTEXT + 1)):
                keep[t] = True
    out: list[str] = []
    k = 0
    while k < n:
        if keep[k]:
            out.append(_row_html(d.rows[k]))
            k += 1
            continue
        end = k
        while end < n and not keep[end]:
            end += 1
        run = d.rows[k:end]
        if len(run) < MIN_FOLD:
            out.extend(_row_html(r) for r in run)
        else:
            hot = sum(r.hot for r in run)
            first = run[0].left.index if run[0].left else 0
            last = run[-1].left.index if run[-1].left else first
            where = f" ({hot} in the hot region)" if hot else ""
            out.append(f'<details class="fold"><summary>{len(run)} unchanged instructions, 0x{16 * first:04x}–'
                       f"0x{16 * last:04x}{where}</summary>{''.join(_row_html(r) for r in run)}</details>")
        k = end
    return "".join(out)


def _moves_html(d: SassDiff, limit: int = 40) -> str:
    """The moved and edited instructions as a list: where each went and which instructions it now issues
    before (moved up) or after (moved down), i.e. whose relative order with it flipped."""
    lefts = [r.left for r in d.rows if r.left is not None and r.left.partner is not None]
    moved = [s for s in lefts if {"moved-up", "moved-down"} & s.marks]
    edited = [s for s in lefts if not ({"moved-up", "moved-down"} & s.marks) and s.marks & set(CONTROL_FIELDS)]
    items: list[str] = []
    for s in sorted(moved, key=lambda x: x.partner or 0)[:limit]:
        assert s.partner is not None
        b, j = s.index, s.partner
        up = "moved-up" in s.marks
        passed = [x for x in lefts if x is not s and x.partner is not None
                  and ((x.index < b and x.partner > j) if up else (x.index > b and x.partner < j))]
        ops = [p.text.split()[1] if p.text.startswith("@") else p.text.split()[0] for p in passed[:4]]
        more = f" and {len(passed) - 4} more" if len(passed) > 4 else ""
        rel = "before" if up else "after"
        passed_txt = f", now issued {rel} {', '.join(_e(o) for o in ops)}{more}" if ops else ""
        edits = sorted(m for m in s.marks if m in CONTROL_FIELDS)
        edit_txt = f"; control edited: {', '.join(edits)}" if edits else ""
        items.append(f'<li><a href="#s{j}"><code>{_e(s.text)}</code></a> {"up" if up else "down"} '
                     f"{abs(j - b)} slot(s), 0x{16 * b:04x} → 0x{16 * j:04x}{passed_txt}{edit_txt}</li>")
    for s in edited[:max(0, limit - len(items))]:
        assert s.partner is not None
        fields = ", ".join(sorted(m for m in s.marks if m in CONTROL_FIELDS))
        items.append(f'<li><a href="#s{s.partner}"><code>{_e(s.text)}</code></a> at 0x{16 * s.partner:04x}: '
                     f"control edited ({fields})</li>")
    total = len(moved) + len(edited)
    if not total:
        return '<p class="muted">No instruction moved and no control code changed.</p>'
    extra = f"<li class=muted>… and {total - len(items)} more (marked in the diff below)</li>" if total > len(items) else ""
    return f'<ul class="moves">{"".join(items)}{extra}</ul>'


def _config_table(l1: Mapping[str, Any], chosen: str | None, est: str) -> str:
    trials = _get(l1, "trials", list, "'level1'.")
    if not trials:
        return '<p class="muted">Level 1 recorded no trials.</p>'
    for k, t in enumerate(trials):
        if not isinstance(t, dict) or not isinstance(t.get("label"), str):
            raise UsageError(f"tune report: key 'level1'.'trials'[{k}] must be a dict with a string 'label'")
    at_best = l1.get("autotune_best_label")
    at_ms = _num(l1.get("autotune_best_ms"))
    ok = sorted((t for t in trials if t.get("status", "ok") == "ok"),
                key=lambda t: (_num(t.get("median_ms")) is None, _num(t.get("median_ms")) or 0.0, t["label"]))
    bad = sorted((t for t in trials if t.get("status", "ok") != "ok"),
                 key=lambda t: (_STATUS_ORDER.get(str(t.get("status")), 9), t["label"]))
    rows = []
    for rank, t in enumerate(ok, 1):
        ms = _num(t.get("median_ms"))
        vs = at_ms / ms if at_ms and ms else None
        tags = ""
        cls = []
        if t["label"] == chosen:
            tags += '<span class="tag ship">ships</span>'
            cls.append("chosen")
        if t["label"] == at_best:
            tags += '<span class="tag at">autotune best</span>'
            cls.append("atbest")
        elif t.get("autotune"):
            tags += '<span class="tag">autotune list</span>'
        c = f' class="{" ".join(cls)}"' if cls else ""
        rows.append(f"<tr{c}><td class=n>{rank}</td><td><code>{_e(t['label'])}</code>{tags}</td>"
                    f"<td class=n>{_ms(ms)}</td><td class=n>{_x(vs)}</td><td class=n>{_sci(t.get('rel_err'))}</td></tr>")
    unchecked = est and all(_num(t.get("rel_err")) is None for t in ok)
    what = ("were estimated (the cost model runs nothing, so no output was checked)" if unchecked
            else "ran and matched the reference")
    out = [f"<p>{len(ok)} configuration(s) {what}; sorted by time{est}. "
           f"“vs autotune best” is the autotune list’s best time over the row’s.</p>",
           "<table class=configs><tr><th>#</th><th>configuration</th><th>median ms</th><th>vs autotune best</th>"
           f"<th>max rel. error</th></tr>{''.join(rows)}</table>"]
    if bad:
        frows = "".join(f"<tr><td><code>{_e(t['label'])}</code></td><td class=bad>{_e(t.get('status'))}</td>"
                        f"<td class=mono>{_e(t.get('error') or _sci(t.get('rel_err')))}</td></tr>" for t in bad)
        out.append(f"<h3>Rejected configurations ({len(bad)})</h3><table class=failures><tr><th>configuration</th>"
                   f"<th>status</th><th>reason</th></tr>{frows}</table>")
    return "".join(out)


def _space_html(space: Mapping[str, Any]) -> str:
    """The ``space`` of a report (:func:`kbuild.build.tuning._pruned_space`: a derived space and its pruning): the
    dimensions, the counts, each block size an output check showed safe or left out (and why), and each pruned
    point with its reason."""
    def table(value: Any) -> Mapping[str, Any]:
        return value if isinstance(value, Mapping) else {}

    dims = table(table(space.get("space")).get("dimensions"))

    def dimension(name: str, d: Mapping[str, Any]) -> str:
        values = ", ".join(map(str, d.get("values", [])))
        why = f" ({_e(d['why'])})" if d.get("why") else ""
        return f"<code>{_e(name)}</code> {_e(values)}{why}"

    dim_txt = "; ".join(dimension(name, d) for name, d in dims.items() if isinstance(d, Mapping))
    counts = table(space.get("pruned"))
    by_reason = ", ".join(f"{_e(r)} {n}" for r, n in counts.items() if n) or "none"
    out = [f"<p id=space>{_e(space.get('size', '—'))} points derived from what cannot change results "
           f"({dim_txt or '—'}); {_e(space.get('kept', '—'))} kept, {_e(space.get('searched', '—'))} searched; "
           f"pruned on the CPU before any GPU time: {by_reason}.</p>"]
    checks = [c for c in table(space.get("space")).get("output_checks", []) if isinstance(c, Mapping)]
    if checks:  # block sizes shown safe (or not) by checking outputs on the recorded calls with the caller's grid
        out.append("<table class=configs id=outputchecks><tr><th>constexprs</th><th>output check</th><th>why</th></tr>")
        for c in checks:
            cx = ", ".join(f"{k}={v}" for k, v in table(c.get("constexprs")).items())
            verdict = '<span class=ok>shown safe</span>' if c.get("accepted") else '<span class=bad>left out</span>'
            out.append(f"<tr><td><code>{_e(cx)}</code></td><td>{verdict}</td><td>{_e(c.get('why', ''))}</td></tr>")
        out.append("</table>")
    rows = [p for p in space.get("points", []) if isinstance(p, Mapping) and not p.get("kept")]
    if rows:
        out.append("<table class=configs id=pruned><tr><th>configuration</th><th>pruned: reason</th><th>detail</th>"
                   "<th>registers</th><th>spills</th><th>shared</th></tr>")
        for p in rows:
            spills = (p.get("spill_stores") or 0) + (p.get("spill_loads") or 0) if p.get("registers") is not None \
                else None
            out.append(f"<tr><td><code>{_e(p.get('label'))}</code></td><td>{_e(p.get('reason'))}</td>"
                       f"<td>{_e(p.get('detail') or p.get('error') or '')}</td><td>{_e(p.get('registers', '—'))}</td>"
                       f"<td>{_e('—' if spills is None else spills)}</td><td>{_e(p.get('shared', '—'))}</td></tr>")
        out.append("</table>")
    return "".join(out)


def _peers_html(peers: Mapping[str, Any]) -> str:
    """The ``peers`` of a report (:func:`kbuild.bench.peers.time_beside_peers`): each peer timed interleaved with what
    ships, on the same inputs, or why not."""
    if peers.get("error"):
        return f'<p id=peers class=bad>Peers not timed: {_e(peers["error"])}</p>'
    rows = [p for p in peers.get("peers", []) if isinstance(p, Mapping)]
    if peers.get("not_timed"):
        names = ", ".join(f"{_e(p.get('name'))}" for p in rows) or "—"
        return f'<p id=peers class=muted>Peers not timed ({_e(peers["not_timed"])}): {names}.</p>'
    out = [f"<p id=peers>What ships: {_ms(_num(peers.get('kernel_ms')))} ms (median), timed interleaved with each "
           f"peer on the same inputs ({_e(peers.get('rounds', '—'))} rounds × {_e(peers.get('reps', '—'))} "
           "launches, L2 flushed before each). Ratio = peer / kernel: above 1, what ships is faster.</p>",
           "<table class=configs id=peertable><tr><th>peer</th><th>call</th><th>output vs reference</th>"
           "<th>median ms</th><th>peer / kernel</th><th>95% CI</th></tr>"]
    for p in rows:
        if not p.get("available", True):
            out.append(f"<tr><td><code>{_e(p.get('label'))}</code></td><td>{_e(p.get('name'))}</td>"
                       f"<td colspan=4 class=muted>unavailable: {_e(p.get('reason', ''))}</td></tr>")
            continue
        errs: Mapping[str, Any] = p["rel_err"] if isinstance(p.get("rel_err"), Mapping) else {}
        worst = max((_num(v) or 0.0 for v in errs.values()), default=None)
        agrees = p.get("agrees")
        check = ("—" if agrees is None else
                 f'<span class={"ok" if agrees else "bad"}>{"agrees" if agrees else "DIFFERS"}</span>'
                 f"{f' (max rel. error {worst:.2e})' if worst is not None else ''}")
        out.append(f"<tr><td><code>{_e(p.get('label'))}</code></td><td>{_e(p.get('name'))}</td><td>{check}</td>"
                   f"<td>{_ms(_num(p.get('median_ms')))}</td><td>{_x(p.get('ratio'))}</td>"
                   f"<td>{_ci(p.get('ratio_ci'))}</td></tr>")
    out.append("</table>")
    return "".join(out)


#: Line colours of the search curves, one per series in order.
_CURVE_COLOURS = ("#2a6fdb", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#5c940d")


def _points(raw: Any) -> list[tuple[float, float]]:
    """``[[x, y], ...]`` of a report as finite number pairs (anything else is skipped)."""
    out = []
    for p in raw if isinstance(raw, (list, tuple)) else ():
        if isinstance(p, (list, tuple)) and len(p) == 2 and _num(p[0]) is not None and _num(p[1]) is not None:
            out.append((float(p[0]), float(p[1])))
    return out


def level1_curve(l1: Mapping[str, Any]) -> list[tuple[float, float]]:
    """Level 1's search as (configurations measured, best time so far / the autotune list's best), in the order
    the search measured them (the trials' order); a trial that failed counts as measured and improves nothing."""
    trials: list[Any] = l1["trials"] if isinstance(l1.get("trials"), list) else []
    ref = _num(l1.get("autotune_best_ms"))
    best: float | None = None
    out: list[tuple[float, float]] = []
    for i, t in enumerate(trials, 1):
        ms = _num(t.get("median_ms")) if isinstance(t, Mapping) and t.get("status", "ok") == "ok" else None
        if ms is not None and ms > 0:
            best = ms if best is None else min(best, ms)
            ref = ref if ref is not None and ref > 0 else ms
        if best is not None and ref:
            out.append((float(i), best / ref))
    return out


def _curve_svg(series: Mapping[str, list[tuple[float, float]]], *, ident: str, title: str, ylabel: str) -> str:
    """An inline SVG step chart (no script, no image file) of ``series``: name → (x, y) points, x the evaluations
    so far, y the best time so far over a reference (1.0 dashed: below it, faster). Empty when nothing to draw."""
    drawn = {name: pts for name, pts in series.items() if len(pts) >= 1}
    if not drawn:
        return ""
    w, h, left, right, top, bottom = 560, 220, 56, 150, 24, 36
    xs = [x for pts in drawn.values() for x, _ in pts]
    ys = [y for pts in drawn.values() for _, y in pts] + [1.0]
    x_max = max(max(xs), 1.0)
    y_lo, y_hi = min(ys), max(ys)
    pad = max((y_hi - y_lo) * 0.08, 0.01)
    y_lo, y_hi = y_lo - pad, y_hi + pad

    def px(x: float) -> float:
        return left + (w - left - right) * x / x_max

    def py(y: float) -> float:
        return top + (h - top - bottom) * (y_hi - y) / (y_hi - y_lo)

    parts = [f'<svg class=curve id={_e(ident)} width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role=img aria-label="{_e(title)}">',
             f'<text x="{left}" y="14" font-size="12">{_e(title)}</text>',
             f'<line x1="{left}" y1="{py(1.0):.1f}" x2="{w - right}" y2="{py(1.0):.1f}" stroke="#999" '
             'stroke-dasharray="4 3"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#333"/>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#333"/>',
             f'<text x="{left - 4}" y="{py(y_hi - pad) + 4:.1f}" font-size="10" text-anchor="end">'
             f'{y_hi - pad:.3f}</text>',
             f'<text x="{left - 4}" y="{py(y_lo + pad) + 4:.1f}" font-size="10" text-anchor="end">'
             f'{y_lo + pad:.3f}</text>',
             f'<text x="{left}" y="{h - bottom + 14}" font-size="10">0</text>',
             f'<text x="{w - right}" y="{h - bottom + 14}" font-size="10" text-anchor="end">{x_max:g}</text>',
             f'<text x="{(left + w - right) / 2:.0f}" y="{h - 6}" font-size="10" text-anchor="middle">'
             'evaluations</text>',
             f'<text x="12" y="{(top + h - bottom) / 2:.0f}" font-size="10" text-anchor="middle" '
             f'transform="rotate(-90 12 {(top + h - bottom) / 2:.0f})">{_e(ylabel)}</text>']
    for i, (name, pts) in enumerate(drawn.items()):
        colour = _CURVE_COLOURS[i % len(_CURVE_COLOURS)]
        steps: list[tuple[float, float]] = []
        for x, y in pts:  # a step after each point: the best so far holds until the next improvement
            if steps:
                steps.append((x, steps[-1][1]))
            steps.append((x, y))
        if len(steps) == 1:
            steps.append((x_max, steps[0][1]))
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in steps)
        parts.append(f'<polyline class=series data-name="{_e(name)}" fill="none" stroke="{colour}" '
                     f'stroke-width="1.6" points="{line}"/>')
        parts.append(f'<text x="{w - right + 8}" y="{top + 14 * (i + 1)}" font-size="11" fill="{colour}">'
                     f'{_e(name)} {pts[-1][1]:.3f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _sci(v: Any) -> str:
    f = _num(v)
    return "—" if f is None else f"{f:.2e}"


def _algorithms_table(l2: Mapping[str, Any], est: str) -> str:
    algs = l2.get("algorithms")
    if not isinstance(algs, dict) or not algs:
        return ""
    winner = l2.get("winner")
    rows = []
    for name, a in algs.items():
        if not isinstance(a, dict):
            raise UsageError(f"tune report: key 'level2'.'algorithms'[{name!r}] must be dict")
        tag = '<span class="tag ship">winner</span>' if name == winner else ""
        best = _num(a.get("best_ratio"))
        conf = _num(a.get("confirmed_ratio"))
        rows.append(f"<tr><td>{_e(name)}{tag}</td><td class=n>{_e(a.get('evaluations', '—'))}</td>"
                    f"<td class=n>{_x(1 / best if best else None)}</td><td class=n>{_x(1 / conf if conf else None)}"
                    f"</td><td class=n>{_e(a.get('moves', '—'))}</td></tr>")
    return (f"<p>SASS searches on the chosen configuration (speedups over its untouched cubin{est}):</p>"
            "<table><tr><th>algorithm</th><th>evaluations</th><th>search best</th><th>re-timed best</th>"
            f"<th>moves</th></tr>{''.join(rows)}</table>")


def _final_aa_spread(final: Mapping[str, Any]) -> float | None:
    """The side-by-side run's A/A spread: given, or from its A/A ratio and interval as
    :func:`kbuild.tune.accept.aa_spread` computes it."""
    given = _num(final.get("aa_spread"))
    if given is not None:
        return given
    ci, ratio = final.get("aa_ci"), _num(final.get("aa_ratio"))
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2) or ratio is None:
        return None
    lo, hi = _num(ci[0]), _num(ci[1])
    return None if lo is None or hi is None else max(abs(1.0 - lo), abs(hi - 1.0), abs(1.0 - ratio))


def render_report_html(report: Mapping[str, Any], baseline_cubin: bytes, shipped_cubin: bytes, *,
                       kernel_symbol: str | None = None, curve_png: bytes | None = None) -> str:
    """The page as a string (see the module docstring for ``report``). UsageError on bad input."""
    if not isinstance(report, Mapping):
        raise UsageError(f"tune report must be a dict, got {type(report).__name__}")
    kernel = _get(report, "kernel", str, "")
    if not kernel:
        raise UsageError("tune report: key 'kernel' is missing (the kernel's name)")
    for what, blob in (("baseline_cubin", baseline_cubin), ("shipped_cubin", shipped_cubin)):
        if not isinstance(blob, (bytes, bytearray)):
            raise UsageError(f"tune report: {what} must be bytes, got {type(blob).__name__}")
    if curve_png is not None and not bytes(curve_png[:8]) == PNG_MAGIC:
        raise UsageError("tune report: curve_png is not a PNG image")
    target = _get(report, "target", str, "") or "—"
    gpu = _get(report, "gpu", str, "")
    backend = _get(report, "backend", str, "") or "—"
    l1 = _get(report, "level1", dict, "") or {}
    gains = _get(report, "gains", dict, "") or {}
    final = _get(report, "final", dict, "")
    chosen = (_get(report, "config_label", str, "") or l1.get("chosen") or l1.get("best_label"))
    l2 = _level2(report, chosen)
    decision = (l2 or {}).get("decision") or {}
    if not isinstance(decision, dict):
        raise UsageError("tune report: key 'level2'.'decision' must be dict")
    estimate = is_estimate(report)
    est = f" ({ESTIMATE_LABEL})" if estimate else ""

    region = None
    kind = None
    reg = (l2 or {}).get("region")
    if isinstance(reg, dict) and _num(reg.get("start")) is not None and _num(reg.get("end")) is not None:
        region, kind = (int(reg["start"]), int(reg["end"])), reg.get("kind")
    diff = sass_diff(bytes(baseline_cubin), bytes(shipped_cubin), kernel_symbol, region=region,
                     region_kind=str(kind) if kind else None)
    accepted = bool(decision.get("accepted"))
    tuned = not diff.identical
    if tuned and accepted:
        right_head = "shipped schedule (tuned)"
    elif tuned:
        right_head = "best candidate — NOT shipped (the untouched schedule ships)"
    else:
        right_head = "shipped schedule (= untouched)"

    # gains
    g1 = _num(gains.get("level1")) if gains else None
    if g1 is None:
        g1 = _num(l1.get("gain"))
    g2 = _num(gains.get("level2")) if gains else None
    if g2 is None:
        g2 = _num(decision.get("speedup")) if accepted else (1.0 if decision else None)
    total = _num(gains.get("total")) if gains else None
    if total is None and g1 is not None and g2 is not None:
        total = g1 * g2
    trials: list[Any] = l1["trials"] if isinstance(l1.get("trials"), list) else []
    shipped_trial = next((t for t in trials if isinstance(t, dict) and t.get("label") == chosen), None)
    wrong = [t for t in trials if isinstance(t, dict) and t.get("status") == "wrong-result"]
    at_best = l1.get("autotune_best_label")

    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
             f"<title>kbuild tune: {_e(kernel)} ({_e(target)})</title><style>{_CSS}</style></head><body>",
             f"<h1>kbuild tune report: <code>{_e(kernel)}</code></h1>",
             f'<p class=muted>target {_e(target)} · GPU {_e(gpu or "—")} · backend {_e(backend)}'
             f'{f" · SASS symbol <code>{_e(diff.kernel)}</code>" if diff.kernel != kernel else ""}</p>']
    if estimate:
        parts.append(f'<div class=estimate id=estimate>{ESTIMATE_LABEL}: the figures on this page come from '
                     "kbuild's CPU cost model, not from timing on a GPU. Nothing tuned on the cost model ships.</div>")
    # summary
    ships = f"<code>{_e(chosen or '—')}</code>"
    default = report.get("default_label")
    if isinstance(default, str) and default != chosen:
        ships += f' <span class=muted>(untuned default: <code>{_e(default)}</code>)</span>'
    ships += f" with the {'tuned' if tuned and accepted else 'untouched'} SASS schedule"
    if final and _num(final.get("speedup")) is not None:
        final_txt = (f"{_x(final.get('speedup'))} (95% CI {_ci(final.get('speedup_ci', final.get('ci')))}, A/A "
                     f"spread {_pct(_final_aa_spread(final))}), side by side against the autotune best in one run")
    elif final and final.get("error"):
        final_txt = f'<span class=bad>not measured: {_e(final["error"])}</span>'
    else:
        final_txt = "—" + (" (no side-by-side GPU re-timing on the cost model)" if estimate else "")
    l2_txt = (f"{_x(decision.get('speedup'))} (95% CI {_ci(decision.get('speedup_ci'))}, A/A spread "
              f"{_pct(decision.get('aa_spread'))})") if decision.get("speedup") is not None else _x(g2)
    verdict = (f'<span class={"ok" if accepted else "muted"}>{_e(decision.get("reason", ""))}</span>'
               if decision else "")
    rejected = f"{len(wrong)} configuration(s) with wrong results rejected"
    if shipped_trial is not None and shipped_trial.get("status", "ok") != "ok":
        wrong_txt = f'<span class=bad>the shipped configuration has status {_e(shipped_trial.get("status"))}</span>'
    elif shipped_trial is None:
        wrong_txt = f"unknown — the shipped configuration is not in the level-1 table; {rejected}"
    elif estimate and _num(shipped_trial.get("rel_err")) is None:
        wrong_txt = (f"not checked — {ESTIMATE_LABEL}: nothing ran, so no output was compared with the reference "
                     "(a GPU run checks every configuration before it may ship)")
    else:
        rel = _num(shipped_trial.get("rel_err"))
        wrong_txt = (f"<span class=ok>0</span> — the shipped configuration matched the reference"
                     f"{f' (max rel. error {rel:.2e})' if rel is not None else ''}; {rejected}")
        if decision.get("checks"):
            wrong_txt += f"; its schedule bit-exact on {_e(decision['checks'])} input sets"
    parts.append("<h2>Summary</h2><dl class=summary>"
                 f"<dt>What ships</dt><dd>{ships}</dd>"
                 f"<dt>Total gain</dt><dd><span class=big>{_x(total)}</span> over the autotune list’s best "
                 f"(<code>{_e(at_best or '—')}</code>){est}</dd>"
                 f"<dt>Measured side by side</dt><dd>{final_txt}</dd>"
                 f"<dt>Level 1 (configuration)</dt><dd>{_x(g1)}{est}: {_ms(_num(l1.get('autotune_best_ms')))} ms → "
                 f"{_ms(_num(shipped_trial.get('median_ms')) if shipped_trial else None)} ms; "
                 f"{_e(l1.get('method', '—'))} search, {_e(l1.get('evaluations', '—'))} evaluations over "
                 f"{_e(l1.get('space_size', len(trials) or '—'))} configurations</dd>"
                 f"<dt>Level 2 (SASS schedule)</dt><dd>{l2_txt}{est} {verdict}</dd>"
                 f"<dt>Wrong results shipped</dt><dd>{wrong_txt}</dd>"
                 f"<dt>Budget used</dt><dd>{_e(report.get('evaluations', '—'))} evaluations, "
                 f"{_e(report.get('seconds', '—'))} s</dd></dl>")
    space = report.get("space")
    if isinstance(space, Mapping):  # a space derived for a recorded kernel, pruned on the CPU
        parts.append("<h2>Space: derived and pruned</h2>")
        parts.append(_space_html(space))
    peers = report.get("peers")
    if isinstance(peers, Mapping):  # the torch calls a user would make instead, timed beside what ships
        parts.append("<h2>Peers: what a user would call instead</h2>")
        parts.append(_peers_html(peers))
    # configuration table
    parts.append("<h2>Level 1: configurations</h2>")
    parts.append(_config_table(l1, chosen, est) if l1 else '<p class="muted">No level-1 search in this report.</p>')
    if l1:
        parts.append(_curve_svg({"configurations": level1_curve(l1)}, ident="curve1",
                                title=f"Level 1: the search{est}", ylabel="best / autotune best"))
    # level 2
    parts.append("<h2>Level 2: SASS schedule</h2>")
    if l2:
        parts.append(_algorithms_table(l2, est))
    if curve_png is not None:
        uri = "data:image/png;base64," + base64.b64encode(bytes(curve_png)).decode("ascii")
        parts.append(f'<p><img class=curve alt="learning curve" src="{uri}"></p>')
    elif l2 and isinstance(l2.get("algorithms"), Mapping):
        parts.append(_curve_svg({str(name): _points(a.get("curve")) for name, a in l2["algorithms"].items()
                                 if isinstance(a, Mapping)}, ident="curve2",
                                title=f"Level 2: the SASS search{est}", ylabel="best / untouched"))
    c = diff.counts
    hot = (f"hot region ({_e(diff.region_kind or 'region')}): 0x{16 * diff.region[0]:04x}–"
           f"0x{16 * (diff.region[1] - 1):04x}, {diff.region[1] - diff.region[0]} instructions"
           if diff.region else "no hot region")
    cyc = (f"; stall cycles in the hot region {diff.stall_cycles[0]} → {diff.stall_cycles[1]} (sum of stall "
           "fields: a static count, not a timing)" if diff.stall_cycles else "")
    parts.append(f"<h3>What changed</h3><p id=diffsummary>{c['moved']} moved, {c['stall']} stall, {c['yield']} "
                 f"yield, {c['reuse']} reuse, {c['barrier']} scoreboard edit(s); {c['unmatched']} without a "
                 f"counterpart; {diff.baseline_n} instructions; {hot}{cyc}.</p>")
    parts.append(_moves_html(diff))
    parts.append("<p class=muted>An instruction moved up issues earlier: a long-latency load issued earlier "
                 "overlaps its latency with the instructions it passed; one moved down waits less for its "
                 "inputs. The tuner kept only orders the SASS verifier proves equivalent.</p>")
    parts.append('<div class=legend id=legend><strong>Legend:</strong> <span class=sw style="background:var(--moved)">moved '
                 '(↑/↓ slots; click to jump)</span><span class="sw c-stall">stall changed</span>'
                 '<span class="sw c-yield">yield changed</span><span class="sw c-reuse">reuse flags changed</span>'
                 '<span class="sw c-barrier">scoreboard changed</span><span class=sw style="background:var(--unm)">'
                 'no counterpart</span><span class=sw style="border-left:4px solid var(--hot)">hot region</span>'
                 " Control code: <code>[B&lt;waits&gt;:R&lt;read sb&gt;:W&lt;write sb&gt;:Y:S&lt;stall&gt;:"
                 "U&lt;reuse&gt;]</code></div>")
    parts.append(f'<h3>Side-by-side SASS</h3><div class=diff id=sassdiff><div class=diffhead><div>untouched '
                 f'schedule of <code>{_e(chosen or kernel)}</code></div><div>{_e(right_head)}</div></div>'
                 f"{_diff_rows_html(diff)}</div>")
    parts.append(f'<p class=muted>Generated by kbuild{est}.</p></body></html>\n')
    return "".join(parts)


def write_report_html(report: Mapping[str, Any], baseline_cubin: bytes, shipped_cubin: bytes,
                      path: str | os.PathLike[str], *, kernel_symbol: str | None = None,
                      curve_png: bytes | None = None) -> Path:
    """Write the page for one kernel × target to ``path`` atomically (nothing is written when the input is
    bad: UsageError naming the key). Returns the path."""
    page = render_report_html(report, baseline_cubin, shipped_cubin, kernel_symbol=kernel_symbol,
                              curve_png=curve_png)
    return write_atomic(path, page)


# --- headless Chromium ------------------------------------------------------------------------------------
def find_chromium() -> str | None:
    """A Chromium (or Chrome) executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_render(html_path: str | os.PathLike[str], *, png: str | os.PathLike[str] | None = None,
                    size: tuple[int, int] = (1400, 2000), timeout: float = 180.0) -> str:
    """Load ``html_path`` in headless Chromium: write a screenshot to ``png`` when given, and return the
    rendered DOM (``--dump-dom``). ToolError when Chromium is missing or fails."""
    exe = find_chromium()
    if exe is None:
        raise MissingDependencyError("headless Chromium is not installed (no chromium on PATH); on Debian: "
                                     "apt-get install chromium")
    url = Path(html_path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="kbuild-chromium-") as profile:
        base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}"]
        runs = [[*base, "--dump-dom", url]]
        if png is not None:
            runs.append([*base, f"--screenshot={Path(png).resolve()}", url])
        dom = ""
        for k, cmd in enumerate(runs):
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                raise ToolError("headless Chromium", cmd, 124, f"timed out after {timeout:.0f} s") from None
            if proc.returncode != 0:
                raise ToolError("headless Chromium", cmd, proc.returncode, proc.stderr[-2000:])
            if k == 0:
                dom = proc.stdout
    return dom
