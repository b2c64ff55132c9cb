"""``python -m kbuild.bench``: ``kbuild bench`` without importing the other CLI areas."""

from kbuild.bench.cli import main

raise SystemExit(main())
