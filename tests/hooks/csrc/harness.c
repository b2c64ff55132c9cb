/* Drives the generated launchers (kernel "scale": out, n, scale) against fake_cuda.c.
 * Usage: harness MODE   (MODE: basic | contexts | threads | nocontext | empty) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kbuild_kernels.h"

void fake_set_context(uintptr_t id);

static int report(CUresult r) {
  printf("result %d %s\n", (int)r, kbt_last_error());
  return r == CUDA_SUCCESS ? 0 : 1;
}

static void *worker(void *arg) {
  (void)arg;
  fake_set_context(7);
  CUresult r = kbt_scale((CUstream)5, 2, 1, 1, 4096, 10, 0.5f);
  return (void *)(uintptr_t)r;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "basic";
  if (strcmp(mode, "nocontext") == 0)
    return report(kbt_scale((CUstream)0, 1, 1, 1, 0, 1, 1.0f));
  fake_set_context(1);
  if (strcmp(mode, "basic") == 0) {
    int bad = report(kbt_scale((CUstream)3, 4, 2, 1, 4096, 123, 2.5f));
    return bad | report(kbt_scale((CUstream)3, 4, 2, 1, 8192, 7, 1.0f));
  }
  if (strcmp(mode, "empty") == 0)
    return report(kbt_scale((CUstream)3, 0, 1, 1, 4096, 1, 1.0f));
  if (strcmp(mode, "contexts") == 0) {
    int bad = report(kbt_scale((CUstream)0, 1, 1, 1, 1, 1, 1.0f));
    fake_set_context(2);
    bad |= report(kbt_scale((CUstream)0, 1, 1, 1, 1, 1, 1.0f));
    fake_set_context(1);
    return bad | report(kbt_scale((CUstream)0, 1, 1, 1, 1, 1, 1.0f));
  }
  if (strcmp(mode, "threads") == 0) {
    pthread_t t[16];
    for (int i = 0; i < 16; ++i) pthread_create(&t[i], NULL, worker, NULL);
    int bad = 0;
    for (int i = 0; i < 16; ++i) {
      void *r;
      pthread_join(t[i], &r);
      bad |= (int)(uintptr_t)r != 0;
    }
    printf("threads %s\n", bad ? "failed" : "ok");
    return bad;
  }
  return 2;
}
