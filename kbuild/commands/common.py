"""Arguments shared by several verbs (``--config``, ``--targets``, ``--json``), and the store they open late."""

from __future__ import annotations

import argparse
from typing import Any

from kbuild.errors import UsageError
from kbuild.settings.model import Settings
from kbuild.settings.sources import load_settings


def add_config_args(p: argparse.ArgumentParser, *, targets: bool = True) -> None:
    p.add_argument("--config", default="pyproject.toml", metavar="PYPROJECT",
                   help="the project's pyproject.toml (default: ./pyproject.toml)")
    if targets:
        p.add_argument("--targets", metavar="SM[,SM...]", default=None,
                       help="comma-separated targets, overriding [tool.kbuild].targets (e.g. sm_90)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def settings_from_args(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def target_list(args: argparse.Namespace) -> list[str] | None:
    """``--targets``' names (None when not given: the project's targets); a given but empty list is an error."""
    raw = getattr(args, "targets", None)
    if raw is None:
        return None
    names = [t.strip() for t in raw.split(",") if t.strip()]
    if not names:
        raise UsageError(f"--targets {raw!r}: no target named; give e.g. sm_90 or sm_80,sm_90")
    return names


class LazyStore:
    """The settings' tiered store, opened on first use: the pipeline resolves every kernel before it
    touches the store, so bad input still creates no store directory (and opens no store: diskcache writes
    its database when it opens one)."""

    def __init__(self, settings: Settings, *, strict: bool | None = None) -> None:
        self._settings = settings
        self._strict = settings.strict if strict is None else strict
        self._store: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._store is None:
            from kbuild.cache import open_store

            self._store = open_store(self._settings, strict=self._strict)
        return getattr(self._store, name)

    def __enter__(self) -> LazyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._store is not None:
            self._store.close()
