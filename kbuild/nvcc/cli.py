"""``kbuild nvcc NVCC ARGS...``: the nvcc launcher as a verb (the same as the ``kbuild-nvcc`` console script);
``kbuild nvcc --where``: the nvcc installed from the package index, for ``CMAKE_CUDA_COMPILER``."""

from __future__ import annotations

import argparse

from kbuild.console import emit_json
from kbuild.errors import MissingDependencyError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nvcc", help="compile CUDA C++ through nvcc, caching cicc and ptxas per architecture",
                       description="Run nvcc's own --dryrun plan step by step, answering cicc and ptxas from the "
                                   "artefact store (usable as CMAKE_CUDA_COMPILER_LAUNCHER: kbuild-nvcc). "
                                   "Anything the launcher cannot read runs plain nvcc with a warning.")
    p.add_argument("--where", action="store_true",
                   help="print the path of the nvcc installed from the package index (nvidia-cuda-nvcc) and exit")
    p.add_argument("--json", action="store_true", help="with --where: print one JSON document")
    p.add_argument("nvcc_command", nargs=argparse.REMAINDER, metavar="NVCC ARGS",
                   help="the real nvcc and its arguments")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kbuild.nvcc.launcher import launch
    from kbuild.nvcc.toolkit import find_nvcc

    if args.where:
        nvcc = find_nvcc()
        if nvcc is None:
            raise MissingDependencyError("no nvcc from the package index is installed; "
                                         "pip install nvidia-cuda-nvcc nvidia-cuda-crt nvidia-cuda-runtime")
        if args.json:
            emit_json({"nvcc": str(nvcc), "toolkit": str(nvcc.parent.parent)})
        else:
            print(nvcc)
        return 0
    return launch(args.nvcc_command)
