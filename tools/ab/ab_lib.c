/* Whole-library A/B: two builds of libNVFP4 loaded into one process with
 * dlmopen (each in its own link namespace, with its own worker pool), the
 * same session linear created in each from the same weight, and
 * Q4_linear_forward called alternately in time slices, both orders; the
 * outputs are compared byte for byte. For changes outside the kernel table
 * files (the drivers in src/kernels/cpu_ops.cpp, the pool, the API layer),
 * which tools/ab/ab.sh cannot swap. Only the public C API is used.
 *
 *   git worktree add /tmp/base REV && (cd /tmp/base && cmake --preset release &&
 *     cmake --build --preset release -j2 --target NVFP4)
 *   cc -O2 -Iinclude tools/ab/ab_lib.c -ldl -o /tmp/ab_lib
 *   /tmp/ab_lib /tmp/base/build/release/libNVFP4.so build/release/libNVFP4.so N K M MODE [nf4]
 *
 * MODE: 0 exact, 1 fast. Environment: T (threads, default 2), OFF (bytes
 * the output starts past a 64-byte boundary, default 0), SLICE (seconds per
 * slice, default 0.003), ROUNDS (default 30). Prints the best and median
 * time per call of each side and their ratio old/new (above 1: the new
 * build is faster). Each library has its own worker pool, whose workers
 * watch for work for Q4_SPIN_US (1 ms) after their last job: the start of
 * each slice shares the cores with the other side's spinning workers, the
 * same for both sides. Do not time anything while other work (a build, a
 * CI run) uses the machine.
 *
 * Fast against exact in one library (the maps in docs/performance.md since
 * the forty-sixth session): ONE_LIB=1 loads it once with dlopen (one pool,
 * so task counts are compared fairly) and MODE_B sets the second side's
 * math mode, e.g. exact (old) against fast (new) on the AVX2 kernels:
 *   Q4_FORCE_ISA=avx2 ONE_LIB=1 MODE_B=1 SLICE=0.005 ROUNDS=12 \
 *     /tmp/ab_lib build/release/libNVFP4.so build/release/libNVFP4.so 64 512 24 0
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvfp4/session.h"

#define AB_PROG "ab_lib"
#include "ab_common.h"

typedef int32_t (*ConfigInitFn)(Q4_session_config*);
typedef int32_t (*SessionCreateFn)(const Q4_session_config*, Q4_session**);
typedef int32_t (*BundleInitFn)(Q4_weight_bundle*);
typedef int32_t (*LinearCreateFn)(Q4_session*, const Q4_weight_bundle*, Q4_linear**);
typedef int32_t (*ForwardFn)(Q4_linear*, const DLTensor*, DLTensor*);

typedef struct {
  ForwardFn forward;
  Q4_linear* linear;
} Side;

static Side load_side(const char* path, int64_t n, int64_t k, int mode, int format, float* w) {
  const char* one = getenv("ONE_LIB");
  void* lib = one != NULL && atoi(one) != 0 ? dlopen(path, RTLD_NOW | RTLD_LOCAL)
                                            : dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "ab_lib: %s\n", dlerror());
    exit(2);
  }
  ConfigInitFn config_init = (ConfigInitFn)sym(lib, "Q4_session_config_init");
  SessionCreateFn session_create = (SessionCreateFn)sym(lib, "Q4_session_create");
  BundleInitFn bundle_init = (BundleInitFn)sym(lib, "Q4_weight_bundle_init");
  LinearCreateFn linear_create = (LinearCreateFn)sym(lib, "Q4_linear_create");
  Side s;
  s.forward = (ForwardFn)sym(lib, "Q4_linear_forward");
  Q4_session_config c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  config_init(&c);
  c.num_threads = (int32_t)env_or("T", 2);
  c.math_mode = mode;
  Q4_session* session = NULL;
  if (session_create(&c, &session) != 0) {
    fprintf(stderr, "ab_lib: %s: session not created\n", path);
    exit(2);
  }
  int64_t shape[2] = {n, k};
  DLTensor wt = tensor(w, shape, 2, kDLFloat, 32);
  Q4_weight_bundle b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  bundle_init(&b);
  b.format = format;
  b.source = Q4_WEIGHT_FLOAT;
  b.weight = &wt;
  b.out_features = n;
  b.in_features = k;
  if (linear_create(session, &b, &s.linear) != 0) {
    fprintf(stderr, "ab_lib: %s: linear not created\n", path);
    exit(2);
  }
  return s;
}

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: ab_lib OLD.so NEW.so N K M MODE [nf4]\n");
    return 2;
  }
  const int64_t n = atoll(argv[3]), k = atoll(argv[4]), m = atoll(argv[5]);
  const int mode = atoi(argv[6]);
  const int mode_b = getenv("MODE_B") != NULL ? atoi(getenv("MODE_B")) : mode;
  const int format = argc > 7 && strcmp(argv[7], "nf4") == 0 ? Q4_FORMAT_NF4 : Q4_FORMAT_NVFP4;
  const int off = (int)env_or("OFF", 0);
  const double slice = env_or("SLICE", 0.003);
  const int rounds = (int)env_or("ROUNDS", 30);
  if (n <= 0 || k <= 0 || m <= 0 || rounds <= 0 || off < 0 || off % 4 != 0 || off >= 64) {
    fprintf(stderr, "ab_lib: N, K, M, ROUNDS > 0; OFF a multiple of 4 below 64\n");
    return 2;
  }
  float* w = malloc((size_t)(n * k) * sizeof(float));
  float* x = aligned_alloc(64, (size_t)((m * k * 4 + 63) / 64 * 64));
  char* yb[2];
  double* t[2];
  if (w == NULL || x == NULL) return 3;
  srand(1);
  for (int64_t i = 0; i < n * k; ++i) w[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
  for (int64_t i = 0; i < m * k; ++i) x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
  Side side[2] = {load_side(argv[1], n, k, mode, format, w), load_side(argv[2], n, k, mode_b, format, w)};
  int64_t sx[2] = {m, k}, sy[2] = {m, n};
  DLTensor xt = tensor(x, sx, 2, kDLFloat, 32), yt[2];
  for (int i = 0; i < 2; ++i) {
    yb[i] = aligned_alloc(64, (size_t)((m * n * 4 + 63) / 64 * 64 + 64));
    t[i] = malloc((size_t)rounds * sizeof(double));
    if (yb[i] == NULL || t[i] == NULL) return 3;
    yt[i] = tensor(yb[i] + off, sy, 2, kDLFloat, 32);
    for (int r = 0; r < 3; ++r) side[i].forward(side[i].linear, &xt, &yt[i]);
  }
  for (int r = 0; r < rounds; ++r) {
    for (int a = 0; a < 2; ++a) {
      const int i = (a + r) % 2;
      int calls = 0;
      const double t0 = now_s();
      double e = 0;
      do {
        side[i].forward(side[i].linear, &xt, &yt[i]);
        ++calls;
        e = now_s() - t0;
      } while (e < slice);
      t[i][r] = e / calls;
    }
  }
  const int same = memcmp(yb[0] + off, yb[1] + off, (size_t)(m * n) * sizeof(float)) == 0;
  qsort(t[0], (size_t)rounds, sizeof(double), by_value);
  qsort(t[1], (size_t)rounds, sizeof(double), by_value);
  printf(
      "N %lld K %lld M %lld mode %d/%d off %d: old best %.2f median %.2f | new best %.2f median %.2f us"
      " | old/new best %.3f median %.3f | bits %s\n",
      (long long)n, (long long)k, (long long)m, mode, mode_b, off, t[0][0] * 1e6, t[0][rounds / 2] * 1e6,
      t[1][0] * 1e6, t[1][rounds / 2] * 1e6, t[0][0] / t[1][0], t[0][rounds / 2] / t[1][rounds / 2],
      same ? "same" : "DIFFER");
  return same ? 0 : 1;
}
