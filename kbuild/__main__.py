"""``python -m kbuild``: the same as the ``kbuild`` command."""

from kbuild.cli import main

raise SystemExit(main())
