// Host entry points of the kernels (each returns a cudaError_t as int).
#pragma once
#include <cstdint>

extern "C" {
// C[M,N] (fp16, row-major) = A[M,K] (fp16, row-major) x B[K,N] (fp16, row-major), fp32 accumulation.
// M, N, K multiples of the tile (tile 0: 64x64, 1: 128x64, 2: 128x128; K a multiple of 32).
int kbx_matmul_f16(uintptr_t a, uintptr_t b, uintptr_t c, int M, int N, int K, int tile, uintptr_t stream);
// *out (fp32, zeroed by the caller) += sum of x[0..n).
int kbx_sum_f32(uintptr_t x, uintptr_t out, long long n, uintptr_t stream);
// y = gelu(x) (tanh form), fp16 in and out, fp32 arithmetic.
int kbx_gelu_f16(uintptr_t x, uintptr_t y, long long n, uintptr_t stream);
}
