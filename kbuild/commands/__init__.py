"""One module per top-level CLI verb that orchestrates the library (``kbuild compile``,
``kbuild explain``, ...). Each exposes ``add_parser(subparsers)``."""
