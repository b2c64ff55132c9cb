"""kbuild.templates: C launcher and header templates (data files next to this module) and a tiny renderer.

Templates use ``@NAME@`` placeholders (the CMake ``configure_file`` convention, so that C braces
need no escaping). :func:`render` replaces every placeholder and fails on a placeholder with no
value or a value with no placeholder, so a template and its caller cannot drift apart silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def template_text(name: str) -> str:
    """The text of the template file ``name`` (e.g. ``"launcher.c.in"``)."""
    return (TEMPLATE_DIR / name).read_text(encoding="utf-8")


def render_text(text: str, values: Mapping[str, object], *, name: str = "<template>") -> str:
    """Replace each ``@NAME@`` in ``text`` with ``values[NAME]``; KeyError/ValueError on a mismatch."""
    used = set(_PLACEHOLDER.findall(text))
    missing = sorted(used - set(values))
    if missing:
        raise KeyError(f"template {name}: no value for {', '.join(missing)}")
    unused = sorted(set(values) - used)
    if unused:
        raise ValueError(f"template {name}: values without a placeholder: {', '.join(unused)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def render(name: str, **values: object) -> str:
    """Render the template file ``name`` with ``values``."""
    return render_text(template_text(name), values, name=name)


__all__ = ["TEMPLATE_DIR", "render", "render_text", "template_text"]
