/* A stand-in for libcuda.so.1 on a machine without a GPU (benchmarks only; labelled as such in every result).
 *
 * Every driver call Triton 3.6's cuda_utils and generated launcher, and kbuild's ctypes binding
 * (kbuild/device/cuda.py), make returns CUDA_SUCCESS at once with plausible values: an sm_90 device with 132 SMs and
 * 227 KiB of opt-in shared memory, a current context, a module and a function handle, a pointer's device address
 * equal to its host address, and a launch that only counts itself. Nothing runs on a device: what a benchmark
 * measures against it is the host work around the driver calls, the same for Triton's launcher and kbuild's.
 *
 * Build: cc -O2 -shared -fPIC -o libcuda.so.1 libcuda_standin.c
 */
#include <stdint.h>
#include <string.h>

typedef int CUresult;
static unsigned long long launches = 0;

unsigned long long standin_launches(void) { return launches; }

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDeviceGetName(char *name, int len, int dev) { (void)dev; strncpy(name, "stand-in sm_90", len); return 0; }
CUresult cuDeviceGetAttribute(int *out, int attribute, int dev) {
  (void)dev;
  switch (attribute) {
    case 75: *out = 9; break;          /* compute capability major */
    case 76: *out = 0; break;          /* minor */
    case 16: *out = 132; break;        /* multiprocessor count */
    case 97: *out = 232448; break;     /* max shared memory per block (opt-in) */
    case 82: *out = 65536; break;      /* max registers per block */
    case 10: *out = 32; break;         /* warp size */
    case 36: *out = 2619000; break;    /* memory clock rate */
    case 37: *out = 5120; break;       /* global memory bus width */
    case 13: *out = 1980000; break;    /* clock rate */
    default: *out = 0;
  }
  return 0;
}
CUresult cuCtxGetCurrent(void **ctx) { *ctx = (void *)1; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = (void *)1; return 0; }
CUresult cuCtxGetLimit(size_t *v, int limit) { (void)limit; *v = 0; return 0; }
CUresult cuCtxSetLimit(int limit, size_t v) { (void)limit; (void)v; return 0; }
CUresult cuModuleLoadData(void **mod, const void *image) { (void)image; *mod = (void *)2; return 0; }
CUresult cuModuleUnload(void *mod) { (void)mod; return 0; }
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) { (void)mod; (void)name; *fn = (void *)3; return 0; }
CUresult cuFuncGetAttribute(int *out, int attribute, void *fn) {
  (void)fn;
  *out = attribute == 0 ? 1024 : attribute == 4 ? 32 : 0; /* max threads per block; registers */
  return 0;
}
CUresult cuFuncSetAttribute(void *fn, int attribute, int value) { (void)fn; (void)attribute; (void)value; return 0; }
CUresult cuFuncSetCacheConfig(void *fn, int config) { (void)fn; (void)config; return 0; }
CUresult cuPointerGetAttribute(void *data, int attribute, uint64_t ptr) {
  (void)attribute; *(uint64_t *)data = ptr; return 0;
}
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, uint64_t ptr) {
  (void)n; (void)attrs; (void)data; (void)ptr; return 0;
}
CUresult cuGetErrorString(CUresult code, const char **text) { (void)code; *text = "stand-in error"; return 0; }
CUresult cuGetErrorName(CUresult code, const char **text) { (void)code; *text = "STANDIN_ERROR"; return 0; }
CUresult cuLaunchKernelEx(const void *config, void *fn, void **params, void **extra) {
  (void)config; (void)fn; (void)params; (void)extra; launches++; return 0;
}
CUresult cuOccupancyMaxActiveClusters(int *n, void *fn, const void *config) { (void)fn; (void)config; *n = 1; return 0; }
CUresult cuTensorMapEncodeTiled(void *map, ...) { (void)map; return 0; }
