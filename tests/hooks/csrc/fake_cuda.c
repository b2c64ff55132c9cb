/* A fake libcuda.so.1 for testing kbuild's generated launchers on machines without a GPU.
 *
 * The device's compute capability comes from FAKE_CC (e.g. "86"); the current context from
 * fake_set_context(). Every call that matters is appended to the file named by FAKE_LOG, one
 * line each, so the test can check what the launchers did. Cubins are plain strings here. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread uintptr_t current_ctx = 0;
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;

void fake_set_context(uintptr_t id) { current_ctx = id; }

static void fake_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void fake_log(const char *fmt, ...) {
  const char *path = getenv("FAKE_LOG");
  if (path == NULL) return;
  pthread_mutex_lock(&log_mutex);
  FILE *f = fopen(path, "a");
  if (f != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
  }
  pthread_mutex_unlock(&log_mutex);
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v != NULL ? atoi(v) : fallback;
}

CUresult cuGetErrorString(CUresult error, const char **str) {
  static const char *msgs[] = {"fake: no error", "fake: some CUDA error"};
  *str = error == CUDA_SUCCESS ? msgs[0] : msgs[1];
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
  *ctx = (CUcontext)current_ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id) {
  *id = (unsigned long long)(uintptr_t)ctx + 1000;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev) {
  (void)dev;
  int cc = env_int("FAKE_CC", 90);
  if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *value = cc / 10;
  else if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *value = cc % 10;
  else if (attr == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) *value = env_int("FAKE_OPTIN", 232448);
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  fake_log("load %s ctx=%lu", (const char *)image, (unsigned long)current_ctx);
  if (env_int("FAKE_FAIL_LOAD", 0)) return CUDA_ERROR_INVALID_IMAGE;
  *module = (CUmodule)strdup((const char *)image);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name) {
  fake_log("function %s in %s", name, (const char *)module);
  *fn = (CUfunction)module;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  fake_log("unload %s", (const char *)module);
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction fn) {
  (void)fn;
  *value = attr == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES ? 1024 : 0;
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attr, int value) {
  fake_log("set_attribute %s %d %d", (const char *)fn, (int)attr, value);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void **params,
                        void **extra) {
  (void)extra;
  /* The test kernel's parameters: (CUdeviceptr out, int32 n, float scale) + 2 scratch pointers. */
  CUdeviceptr out = *(CUdeviceptr *)params[0];
  int32_t n = *(int32_t *)params[1];
  float scale = *(float *)params[2];
  CUdeviceptr s0 = *(CUdeviceptr *)params[3];
  CUdeviceptr s1 = *(CUdeviceptr *)params[4];
  fake_log("launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u stream=%lu out=%llu n=%d scale=%g scratch=%llu,%llu",
           (const char *)f, gx, gy, gz, bx, by, bz, shared, (unsigned long)(uintptr_t)stream,
           (unsigned long long)out, n, (double)scale, (unsigned long long)s0, (unsigned long long)s1);
  return env_int("FAKE_FAIL_LAUNCH", 0) ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}
