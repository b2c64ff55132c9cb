// Sum of an fp32 vector: grid-stride loads, a warp-shuffle tree per warp, shared memory across warps, one
// atomicAdd per block.
#include <cstdint>
#include "kernels.h"

namespace {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) sum_f32_kernel(const float* __restrict__ x, float* out, long long n) {
  __shared__ float partial[THREADS / 32];
  float v = 0.f;
  for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n; i += (long long)gridDim.x * THREADS)
    v += x[i];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < THREADS / 32 ? partial[threadIdx.x] : 0.f;
    v = warp_sum(v);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
}

}  // namespace

extern "C" int kbx_sum_f32(uintptr_t x, uintptr_t out, long long n, uintptr_t stream) {
  constexpr int threads = 256;
  long long blocks = (n + threads - 1) / threads;
  if (blocks > 1024) blocks = 1024;
  if (blocks < 1) blocks = 1;
  sum_f32_kernel<threads><<<(unsigned)blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const float*>(x), reinterpret_cast<float*>(out), n);
  return (int)cudaGetLastError();
}
