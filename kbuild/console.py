"""Output for people, separate from library logging.

Library modules log through ``logging.getLogger("kbuild.<module>")``. Commands print through
this module: tables and progress bars go to stderr (rich; colour follows NO_COLOR and
FORCE_COLOR), and ``--json`` output goes to stdout as one JSON document, so that
``kbuild X --json | jq`` always works.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from typing import Any

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


@contextmanager
def progress(description: str, total: int | None, *, enabled: bool = True):
    """A progress bar on stderr. Yields ``advance(n=1, **fields)``; silent when not ``enabled``."""
    if not enabled or (not console.is_terminal and total is None):
        yield lambda n=1, **kw: None
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False, disable=not enabled) as bar:
        task = bar.add_task(description, total=total, status="")

        def advance(n: int = 1, **fields: Any) -> None:
            bar.update(task, advance=n, status=fields.pop("status", ""), **fields)

        yield advance
