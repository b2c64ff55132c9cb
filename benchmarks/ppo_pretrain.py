"""Pretrain the transferable PPO policy across the bench suite on the CPU cost model.

    python benchmarks/ppo_pretrain.py --out kbuild/tune/policies/ppo_suite_sm90.zip [--steps N] \\
        [--exclude NAME ...] [--only NAME ...] [--cache-dir DIR] [--seed S]

Compiles the suite kernels' ``small=True`` sm_90 cubins once (cached in ``--cache-dir``), trains
:class:`kbuild.tune.policy.InstructionPolicy` with MaskablePPO over them for ``--steps`` env steps
(rewards from the cost model: "pretrained on the cost model, CPU estimate"; no GPU involved), and
writes the checkpoint with its metadata (kernels seen, kernels excluded, steps, seconds). ``--exclude``
keeps kernels out of the pretraining set, for leave-one-out transfer reports.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from kbuild.errors import UsageError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="checkpoint to write (.zip)")
    p.add_argument("--steps", type=int, default=6000, help="PPO env steps (default 6000)")
    p.add_argument("--exclude", action="append", default=[], metavar="NAME", help="leave this suite kernel out")
    p.add_argument("--only", action="append", metavar="NAME", help="pretrain on these suite kernels only")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "kbuild-ppo-cubins"),
                   help="where compiled suite cubins are cached")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps <= 0:
        print(f"ppo_pretrain: --steps must be positive, got {args.steps}", file=sys.stderr)
        return int(UsageError.exit_code)
    from kbuild.tune.pretrain import pretrain, suite_cubins

    try:
        kernels = suite_cubins(args.cache_dir, names=args.only)
        result = pretrain(kernels, args.out, steps=args.steps, seed=args.seed, exclude=args.exclude)
    except ValueError as exc:
        print(f"ppo_pretrain: {exc}", file=sys.stderr)
        return int(UsageError.exit_code)
    print(json.dumps({"checkpoint": str(result.path), "bytes": result.path.stat().st_size, **result.meta}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
