// Elementwise GELU (tanh form) on fp16, two elements per thread through __half2, fp32 arithmetic.
#include <cuda_fp16.h>
#include <cstdint>
#include "kernels.h"

namespace {

__device__ __forceinline__ float gelu(float v) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * v * (1.f + tanhf(k0 * (v + k1 * v * v * v)));
}

__global__ void gelu_f16_kernel(const __half* __restrict__ x, __half* __restrict__ y, long long n) {
  long long i = 2 * (blockIdx.x * (long long)blockDim.x + threadIdx.x);
  if (i + 1 < n) {
    float2 f = __half22float2(*reinterpret_cast<const __half2*>(x + i));
    *reinterpret_cast<__half2*>(y + i) = __floats2half2_rn(gelu(f.x), gelu(f.y));
  } else if (i < n) {
    y[i] = __float2half(gelu(__half2float(x[i])));
  }
}

}  // namespace

extern "C" int kbx_gelu_f16(uintptr_t x, uintptr_t y, long long n, uintptr_t stream) {
  constexpr int threads = 256;
  long long pairs = (n + 1) / 2;
  unsigned blocks = (unsigned)((pairs + threads - 1) / threads);
  if (blocks == 0) return 0;
  gelu_f16_kernel<<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __half*>(x), reinterpret_cast<__half*>(y), n);
  return (int)cudaGetLastError();
}
