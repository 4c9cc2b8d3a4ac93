/* Helpers of the whole-library A/B programs (ab_lib.c, ab_ops.c): the
 * clock, environment settings, symbols of a dlopen'ed build, DLTensor
 * views, ordering for medians. AB_PROG names the program in messages. */
#ifndef NVFP4_TOOLS_AB_COMMON_H
#define NVFP4_TOOLS_AB_COMMON_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvfp4/dlpack.h"

#ifndef AB_PROG
#error "AB_PROG: the program's name, for its messages"
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The environment variable as a number, or fallback when unset. */
static double env_or(const char* name, double fallback) {
  const char* v = getenv(name);
  return v != NULL ? atof(v) : fallback;
}

/* A contiguous CPU tensor of ndim dims over p (shape: the caller's). */
static DLTensor tensor(void* p, int64_t* shape, int32_t ndim, uint8_t code, uint8_t bits) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = p;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

/* A symbol of the loaded library; a missing one ends the program. */
static void* sym(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, AB_PROG ": %s: %s\n", name, dlerror());
    exit(2);
  }
  return f;
}

/* qsort order of doubles, ascending. */
static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

#endif
