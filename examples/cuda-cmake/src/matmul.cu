// Tiled fp16 matmul on tensor cores through mma.sync.aligned.m16n8k16 (sm_80+), fp32 accumulation.
// A block of WM x WN warps computes a BM x BN tile of C; each warp a (BM/WM) x (BN/WN) sub-tile made of
// 16x8 mma tiles. A and B tiles of depth BK are staged through shared memory.
#include <cuda_fp16.h>
#include <cstdint>
#include "kernels.h"

namespace {

__device__ __forceinline__ uint32_t pack_half2(__half lo, __half hi) {
  __half2 v = __halves2half2(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__(WM * WN * 32)
matmul_f16_kernel(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
                  int M, int N, int K) {
  constexpr int THREADS = WM * WN * 32;
  constexpr int TM = BM / WM / 16;  // mma tiles per warp along M
  constexpr int TN = BN / WN / 8;   // mma tiles per warp along N
  __shared__ __half As[BM][BK + 8];
  __shared__ __half Bs[BK][BN + 8];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane >> 2, tig = lane & 3;
  const int wm = warp / WN, wn = warp % WN;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

  float acc[TM][TN][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = threadIdx.x; i < BM * BK; i += THREADS) {
      const int r = i / BK, c = i % BK;
      As[r][c] = A[(size_t)(row0 + r) * K + k0 + c];
    }
    for (int i = threadIdx.x; i < BK * BN; i += THREADS) {
      const int r = i / BN, c = i % BN;
      Bs[r][c] = B[(size_t)(k0 + r) * N + col0 + c];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[TM][4], b[TN][2];
#pragma unroll
      for (int tm = 0; tm < TM; ++tm) {
        const int r = wm * (BM / WM) + tm * 16 + group;
        const int c = kk + tig * 2;
        a[tm][0] = pack_half2(As[r][c], As[r][c + 1]);
        a[tm][1] = pack_half2(As[r + 8][c], As[r + 8][c + 1]);
        a[tm][2] = pack_half2(As[r][c + 8], As[r][c + 9]);
        a[tm][3] = pack_half2(As[r + 8][c + 8], As[r + 8][c + 9]);
      }
#pragma unroll
      for (int tn = 0; tn < TN; ++tn) {
        const int n = wn * (BN / WN) + tn * 8 + group;
        const int k = kk + tig * 2;
        b[tn][0] = pack_half2(Bs[k][n], Bs[k + 1][n]);
        b[tn][1] = pack_half2(Bs[k + 8][n], Bs[k + 9][n]);
      }
#pragma unroll
      for (int tm = 0; tm < TM; ++tm)
#pragma unroll
        for (int tn = 0; tn < TN; ++tn) mma_16816(acc[tm][tn], a[tm], b[tn]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int tm = 0; tm < TM; ++tm)
#pragma unroll
    for (int tn = 0; tn < TN; ++tn) {
      const int r = row0 + wm * (BM / WM) + tm * 16 + group;
      const int c = col0 + wn * (BN / WN) + tn * 8 + tig * 2;
      C[(size_t)r * N + c] = __float2half(acc[tm][tn][0]);
      C[(size_t)r * N + c + 1] = __float2half(acc[tm][tn][1]);
      C[(size_t)(r + 8) * N + c] = __float2half(acc[tm][tn][2]);
      C[(size_t)(r + 8) * N + c + 1] = __float2half(acc[tm][tn][3]);
    }
}

template <int BM, int BN, int BK, int WM, int WN>
int launch(const __half* a, const __half* b, __half* c, int M, int N, int K, cudaStream_t s) {
  if (M % BM || N % BN || K % BK) return (int)cudaErrorInvalidValue;
  dim3 grid(N / BN, M / BM);
  matmul_f16_kernel<BM, BN, BK, WM, WN><<<grid, WM * WN * 32, 0, s>>>(a, b, c, M, N, K);
  return (int)cudaGetLastError();
}

}  // namespace

extern "C" int kbx_matmul_f16(uintptr_t a, uintptr_t b, uintptr_t c, int M, int N, int K, int tile,
                              uintptr_t stream) {
  auto A = reinterpret_cast<const __half*>(a);
  auto B = reinterpret_cast<const __half*>(b);
  auto Cp = reinterpret_cast<__half*>(c);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (tile) {
    case 0: return launch<64, 64, 32, 2, 2>(A, B, Cp, M, N, K, s);
    case 1: return launch<128, 64, 32, 4, 2>(A, B, Cp, M, N, K, s);
    case 2: return launch<128, 128, 32, 4, 2>(A, B, Cp, M, N, K, s);
    default: return (int)cudaErrorInvalidValue;
  }
}
