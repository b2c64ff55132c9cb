"""Output for people, separate from library logging.

Library modules log through ``logging.getLogger("kbuild.<module>")``. Commands print through
this module: tables and progress bars go to stderr (rich; colour follows NO_COLOR and
FORCE_COLOR), and ``--json`` output goes to stdout as one JSON document, so that
``kbuild X --json | jq`` always works.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

#: Human output (tables, progress, warnings) goes to stderr.
console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 132)


#: Terminal escape sequences: CSI (``ESC [ ... m``, also the 8-bit ``\x9b``), OSC (``ESC ] ... BEL``,
#: e.g. a window title or a hyperlink), DCS/SOS/PM/APC strings, and two-byte ``ESC x`` sequences.
_ESCAPE_SEQUENCE = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                              r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?|\x1b[ -~]?")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """``text`` from an untrusted source (a wheel's manifest, a zip member's name) made safe for a
    terminal: escape sequences removed, every other control character (and each bidirectional
    override) shown as ``\\xNN`` or ``\\uNNNN``. ``--json`` output needs none of this."""
    s = _ESCAPE_SEQUENCE.sub("", str(text))
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", s)


def table_text(text: object) -> str:
    """:func:`printable`, with rich markup escaped too: for a :func:`print_table` cell or title."""
    from rich.markup import escape

    return escape(printable(text))


def emit_json(obj: Any) -> None:
    """Print ``obj`` as the command's one JSON document on stdout."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While it lasts, whatever anything writes to stdout goes to stderr instead: ``sys.stdout`` (Python's
    ``print``, whichever thread) and file descriptor 1 (C extensions, child processes started meanwhile). For a
    library that prints on its own while a command runs (Ray's ``(raylet) A worker died...``), so that stdout
    holds only the command's own output (one ``--json`` document)."""
    sys.stdout.flush()
    saved = sys.stdout
    try:
        fd_saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptor 1 (a closed stdout): Python's stream alone
        fd_saved = None
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved
        with suppress(OSError, ValueError):
            sys.stderr.flush()
        if fd_saved is not None:
            os.dup2(fd_saved, 1)
            os.close(fd_saved)


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A table on stderr. The first column (the name a reader looks for, and greps for) is never shortened
    while it is at most ``FIRST_COLUMN_MAX`` wide; wide tables wrap the other columns instead."""
    cells = [[str(x) for x in r] for r in rows]
    table = Table(title=title, title_justify="left", header_style="bold")
    for i, c in enumerate(columns):
        if i == 0:
            width = max([len(c), *(len(r[0]) for r in cells if r)])
            table.add_column(c, min_width=min(width, FIRST_COLUMN_MAX), no_wrap=width <= FIRST_COLUMN_MAX)
        else:
            table.add_column(c)
    for r in cells:
        table.add_row(*r)
    console.print(table)


FIRST_COLUMN_MAX = 40


def warn(message: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {message}")


def info(message: str) -> None:
    console.print(message)


def _bar(fields: str, *, eta_label: bool = False) -> Progress:
    """rich's Progress on stderr with kbuild's columns: description, bar, done/total, ``fields`` (a format over
    the task's fields), elapsed, (``ETA``,) time remaining."""
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(fields),
               TimeElapsedColumn(), *([TextColumn("ETA")] if eta_label else []), TimeRemainingColumn()]
    return Progress(*columns, console=console, transient=False)


@contextmanager
def progress(description: str, total: int | None, *, enabled: bool = True):
    """A progress bar on stderr. Yields ``advance(n=1, **fields)``; silent when not ``enabled``."""
    if not enabled or (not console.is_terminal and total is None):
        yield lambda n=1, **kw: None
        return
    with _bar("{task.fields[status]}") as bar:
        task = bar.add_task(description, total=total, status="")

        def advance(n: int = 1, **fields: Any) -> None:
            bar.update(task, advance=n, status=fields.pop("status", ""), **fields)

        yield advance


class TargetCounts(Protocol):
    """What a bar of :func:`target_bars` shows of one target: entries finished (found, tuned or failed), running,
    failed, waiting on another run's lease, and the level-1 compile shards done, running and failed."""

    total: int
    done: int
    running: int
    failed: int
    waiting: int
    shards_done: int
    shards_running: int
    shards_failed: int


@contextmanager
def target_bars(targets: Mapping[str, int], *,
                enabled: bool = True) -> Iterator[Callable[[Mapping[str, TargetCounts]], None]]:
    """One bar per target of a distributed prewarm (``targets``: name → entries): done, running, failed, waiting,
    compile shards, ETA. Yields ``update(counts by target)``; silent when not ``enabled`` (``--json``); when
    stderr is not a terminal, rich prints the bars' last state only."""
    if not enabled:
        yield lambda counts: None
        return
    with _bar("{task.fields[running]} running · {task.fields[failed]} failed{task.fields[waiting]}"
              "{task.fields[shards]}", eta_label=True) as bar:
        ids = {t: bar.add_task(f"prewarm {t}", total=n, running=0, failed=0, waiting="", shards="")
               for t, n in targets.items()}

        def update(counts: Mapping[str, TargetCounts]) -> None:
            for t, c in counts.items():
                if t in ids:
                    shards = c.shards_done + c.shards_running + c.shards_failed
                    bar.update(ids[t], completed=c.done, running=c.running, failed=c.failed,
                               waiting=f" · {c.waiting} waiting on a lease" if c.waiting else "",
                               shards=(f" · compile shards {c.shards_done} done, {c.shards_running} running, "
                                       f"{c.shards_failed} failed") if shards else "")

        yield update
