"""A workload for ``kbuild record`` in the tests: launches made only in ``multiprocessing`` children.

``python workload_mp.py fork|spawn|forkserver``: a pool of two workers runs three calls (and is terminated by
its ``with`` block, as pools usually are), then one ``Process`` runs a fourth. The parent launches nothing.
"""

import multiprocessing as mp
import sys
from typing import TYPE_CHECKING, cast

from workload_jit import main as jit_main

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext


def work(rows):
    jit_main([f"softmax:{rows}"])
    return rows


if __name__ == "__main__":
    # typeshed types get_context(str) as BaseContext, which lacks Process; every start method's context has it
    ctx = cast("ForkContext | SpawnContext | ForkServerContext", mp.get_context(sys.argv[1]))
    with ctx.Pool(2) as pool:
        print(pool.map(work, [16, 32, 48]))
    p = ctx.Process(target=work, args=(64,))
    p.start()
    p.join()
    sys.exit(p.exitcode)
