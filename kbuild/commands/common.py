"""Arguments shared by several verbs (``--config``, ``--targets``, ``--json``)."""

from __future__ import annotations

import argparse

from kbuild.config import Settings, load_settings


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
    raw = getattr(args, "targets", None)
    return [t.strip() for t in raw.split(",") if t.strip()] if raw else None
