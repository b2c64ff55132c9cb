"""A live progress bar per target for a distributed prewarm (rich, on stderr): done, running, failed, ETA."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from kbuild.console import console


class Counts(Protocol):
    """What a bar shows of one target: entries finished (found, tuned or failed), running, failed, waiting."""

    total: int
    done: int
    running: int
    failed: int
    waiting: int


@contextmanager
def target_bars(targets: Mapping[str, int], *, enabled: bool = True) -> Iterator[Any]:
    """One bar per target (``targets``: name → entries). Yields ``update(counts_by_target)``; silent when not
    ``enabled`` (``--json``) or when stderr is not a terminal and rich would only print the end state."""
    if not enabled:
        yield lambda counts: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[running]} running · {task.fields[failed]} failed{task.fields[waiting]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False) as bar:
        ids = {t: bar.add_task(f"prewarm {t}", total=n, running=0, failed=0, waiting="") for t, n in targets.items()}

        def update(counts: Mapping[str, Counts]) -> None:
            for t, c in counts.items():
                if t in ids:
                    bar.update(ids[t], completed=c.done, running=c.running, failed=c.failed,
                               waiting=f" · {c.waiting} waiting on a lease" if c.waiting else "")

        yield update
