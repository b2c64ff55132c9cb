"""Small Triton kernels whose block-size constexpr an output check can tell apart (issue 35 part 2): a one-pass
masked row kernel (a larger block is safe, a smaller one is not), a loop over a row in blocks (either is safe) and
an unmasked tiled copy (neither is). Used as a module's source by tests that record them."""

BLOCK_KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def row_copy(out_ptr, x_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    tl.store(out_ptr + row * n_cols + offs, tl.load(x_ptr + row * n_cols + offs, mask=mask) * 2.0, mask=mask)


@triton.jit
def row_sum(out_ptr, x_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def tile_copy(out_ptr, x_ptr, TILE: tl.constexpr):
    offs = tl.program_id(0) * TILE + tl.arange(0, TILE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))
'''
