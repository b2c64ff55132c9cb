"""Output for people, separate from library logging.

Library modules log through ``logging.getLogger("kbuild.<module>")``. Commands print through
this module: tables and progress bars go to stderr (rich; colour follows NO_COLOR and
FORCE_COLOR), and ``--json`` output goes to stdout as one JSON document, so that
``kbuild X --json | jq`` always works.
"""

from __future__ import annotations

import json
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


def emit_json(obj: Any) -> None:
    """Print ``obj`` as the command's one JSON document on stdout."""
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    table = Table(title=title, title_justify="left", header_style="bold")
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*(str(x) for x in r))
    console.print(table)


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
