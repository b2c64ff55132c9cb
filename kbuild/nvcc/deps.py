"""Dependency files: what a translation unit read, from the preprocessor, in make's format.

nvcc's plan has no command for the file ``-MD``/``-MMD`` asks for (a pseudo-step ``-- Filter Dependencies --``:
nvcc filters its preprocessor's output itself). The launcher adds ``-MD -MF`` to each preprocessing command of
the plan instead (a side effect that leaves the preprocessed output as it was), reads what they list with
:func:`parse_make_deps`, and writes the union in nvcc's layout with :func:`format_nvcc_deps`. The same lists
are the files the direct mode (:mod:`kbuild.nvcc.direct`) hashes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def parse_make_deps(text: str) -> list[str]:
    """The prerequisites of a make rule as gcc writes them (``target: a.cu b.h \\``), in order, without the
    target; ``\\ `` is an escaped space, ``$$`` a dollar sign."""
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    words: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(joined):
        ch = joined[i]
        if ch == "\\" and i + 1 < len(joined) and joined[i + 1] in " #":
            cur.append(joined[i + 1])
            i += 2
            continue
        if ch == "$" and i + 1 < len(joined) and joined[i + 1] == "$":
            cur.append("$")
            i += 2
            continue
        if ch.isspace():
            if cur:
                words.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
        i += 1
    if cur:
        words.append("".join(cur))
    # the target ends with ':' (or is followed by a lone ':')
    for j, w in enumerate(words):
        if w == ":":
            return words[j + 1:]
        if w.endswith(":"):
            return words[j + 1:]
    return []


def union(lists: Iterable[Sequence[str]]) -> list[str]:
    """Every file once, in the order first seen."""
    seen: dict[str, None] = {}
    for files in lists:
        for f in files:
            seen.setdefault(f, None)
    return list(seen)


def _escape(path: str) -> str:
    return path.replace("$", "$$").replace(" ", "\\ ").replace("#", "\\#")


def format_nvcc_deps(target: str, files: Sequence[str]) -> str:
    """A dependency file in nvcc's layout: ``target : first \\`` then one indented file per line."""
    if not files:
        return f"{_escape(target)} :\n"
    lines = [f"{_escape(target)} : {_escape(files[0])}"] + [f"    {_escape(f)}" for f in files[1:]]
    return " \\\n".join(lines) + "\n"


__all__ = ["format_nvcc_deps", "parse_make_deps", "union"]
