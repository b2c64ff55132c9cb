"""What nvcc's shell does to a line of its plan, and the lines the launcher cannot run without that shell.

nvcc runs each command of its plan through ``/bin/sh``, pasting some arguments in double quotes (``-D "X=..."``)
and others bare (``-Xcompiler`` values). The launcher runs the same commands without a shell: :func:`expand`
returns a line that :func:`shlex.split` splits into exactly the words ``sh`` would pass, or raises
:class:`~kbuild.nvcc.plan.Unsupported` naming the first construct for which that is not certain:

* a command substitution (a backquote, ``$(``), an arithmetic or parameter expansion of a variable nvcc did not
  assign, a positional or special parameter (``$1``, ``$$``): what the shell would put there depends on the
  shell's environment, the clock or another program, so it cannot be keyed;
* an unquoted glob (``*``, ``?``, ``[``), a ``~`` starting a word, a brace (bash expands ``{a,b}``), a comment
  ``#`` or an operator (``|``, ``&``, ``;``, ``<``, ``>``, ``(``, ``)``): the shell would match files, cut the
  line, or redirect output (``-Xcompiler -DY=a>b`` writes a file ``b``);
* a backslash inside double quotes before ``$``, a backquote or a newline (``sh`` drops it, ``shlex`` keeps it).

``$NAME`` and ``${NAME}`` of a variable the plan assigns (``"$CICC_PATH/cicc"``) are replaced by its value, in
double quotes or bare, unless the value holds a character that would make the two readings differ (a quote, a
backslash, a ``$``, a backquote; bare also a glob). Single-quoted text is literal, as in ``sh``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAME = re.compile(r"[_A-Za-z][_A-Za-z0-9]*")
#: Characters ``sh`` treats as operators when unquoted.
_OPERATORS = set("|&;<>()")
#: Unquoted pattern and brace characters.
_GLOB = set("*?[{")
#: Characters that ``shlex`` reads differently from ``sh`` in a substituted value (bare / in double quotes).
_BARE_UNSAFE = set("'\"\\$`*?[]{}") | _OPERATORS
_QUOTED_UNSAFE = set("\"\\$`")


class ShellExpansion(Exception):
    """A construct of a plan line that the shell would expand or interpret; ``str()`` names it and the word it
    is in."""

    def __init__(self, what: str, line: str, begin: int) -> None:
        super().__init__(f"{what} in {_word(line, begin)[:160]}")


def _word(line: str, begin: int) -> str:
    """The word of ``line`` that starts at ``begin``, as written (up to the first unquoted blank)."""
    quote = ""
    i = begin
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch == "\\":
            i += 1
        elif ch in "'\"":
            quote = ch
        elif ch.isspace():
            break
        i += 1
    return line[begin:i]


def expand(line: str, env: Mapping[str, str]) -> str:
    """``line`` with nvcc's own ``$VARIABLES`` replaced, ready for :func:`shlex.split`; :class:`ShellExpansion`
    for anything else ``sh`` would expand or interpret."""
    out: list[str] = []
    i, n = 0, len(line)
    quote = ""  # "", "'" or '"'
    word_start = True
    begin = 0  # where the current word starts
    while i < n:
        ch = line[i]
        if quote == "'":
            out.append(ch)
            if ch == "'":
                quote = ""
            i += 1
            continue
        if ch == "\\":
            nxt = line[i + 1] if i + 1 < n else ""
            if quote == '"' and nxt in ("$", "`", "\n"):
                raise ShellExpansion(f"the escaped {nxt!r} in double quotes", line, begin)
            out.append(line[i:i + 2])
            i += 2
            word_start = False
            continue
        if ch == "`":
            raise ShellExpansion("a command substitution (`...`)", line, begin)
        if ch == "$":
            value, length = _variable(line, i, begin, env)
            unsafe = _QUOTED_UNSAFE if quote else _BARE_UNSAFE
            bad = next((c for c in value if c in unsafe), None)
            if bad is not None:
                raise ShellExpansion(f"the value of {line[i:i + length]}, which holds {bad!r},", line, begin)
            out.append(value)
            i += length
            word_start = False
            continue
        if quote == '"':
            if ch == '"':
                quote = ""
            out.append(ch)
            i += 1
            continue
        # unquoted
        if ch in ("'", '"'):
            quote = ch
        elif ch.isspace():
            word_start = True
            out.append(ch)
            i += 1
            begin = i
            continue
        elif ch in _OPERATORS:
            raise ShellExpansion(f"the operator {ch!r}", line, begin)
        elif ch in _GLOB:
            raise ShellExpansion(f"the pattern character {ch!r}", line, begin)
        elif word_start and ch in "~#":
            what = "a home directory (~)" if ch == "~" else "a comment (#)"
            raise ShellExpansion(what, line, begin)
        out.append(ch)
        word_start = False
        i += 1
    return "".join(out)  # an unterminated quote is left to shlex.split, which refuses it


def _variable(line: str, i: int, begin: int, env: Mapping[str, str]) -> tuple[str, int]:
    """The value and length of the ``$NAME`` or ``${NAME}`` at ``line[i]``, when nvcc's plan assigns it."""
    rest = line[i + 1:]
    if rest.startswith("{"):
        m = _NAME.match(rest, 1)
        if m and rest[m.end():m.end() + 1] == "}":
            name, length = m.group(0), m.end() + 2
        else:
            raise ShellExpansion("a parameter expansion (${...})", line, begin)
    else:
        m = _NAME.match(rest)
        if not m:
            raise ShellExpansion(f"the expansion {line[i:i + 2]!r}", line, begin)
        name, length = m.group(0), m.end() + 1
    if name not in env:
        raise ShellExpansion(f"${name} (not assigned by nvcc: the shell would read its environment)", line, begin)
    return env[name], length


__all__ = ["ShellExpansion", "expand"]
