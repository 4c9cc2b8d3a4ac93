/* Whole-library A/B of stateless entry points: two builds of libNVFP4
 * loaded into one process with dlmopen (each in its own link namespace,
 * with its own worker pool), one operation called on the same data by
 * each in turn, in time slices, both orders; the outputs are compared
 * byte for byte. ab_lib.c does the same for session linears.
 *
 *   git worktree add /tmp/base REV && (cd /tmp/base && cmake --preset release &&
 *     cmake --build --preset release -j2 --target NVFP4)
 *   cc -O2 -Iinclude tools/ab/ab_ops.c -ldl -lm -o /tmp/ab_ops
 *   /tmp/ab_ops /tmp/base/build/release/libNVFP4.so build/release/libNVFP4.so OP ROWS K [M]
 *
 * OP: quant-nvfp4 (global scale given), quant-nvfp4-amax (computed from
 * the input), quant-nf4 (blocksize 64), quant-mxfp4: a ROWS x K fp32
 * input, rotated through COPIES copies (default 3: 11008 x 4096 then
 * reads from DRAM); linear-swizzled, linear-linear: NVFP4_linear of M rows
 * (default 1) on a ROWS x K weight with swizzled or linear scales,
 * linear-mxfp4: MXFP4_linear of M rows on the weight quantized to MXFP4
 * (linear E8M0 scales), MODE 0 (exact, default) or 1 (fast), the weight
 * rotated through WCOPIES copies (default 1: in cache where it fits; 8
 * reads 4096 x 4096 from DRAM); dequant-nvfp4, dequant-nf4 (blocksize 64),
 * dequant-mxfp4: the ROWS x K weight quantized from the same input, to
 * OUT=bf16 (default), f16 or f32. Environment: IN=bf16 (the quantize
 * input as bf16, rounded to nearest even from the same values), T (threads, default 2),
 * SLICE (seconds per slice, default 0.003: one call per slice for a call
 * longer than that), ROUNDS (default 40). Prints the median time per call
 * of each side and old/new (above 1: the new build is faster). Each pool's
 * workers watch for work for Q4_SPIN_US (1 ms) after their last job, so
 * for calls of less than a millisecond set Q4_SPIN_US=0 (the other
 * side's spinning workers otherwise share the cores). Do not time anything
 * while other work (a build, a CI run) uses the machine.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvfp4/ops.h"

#define AB_PROG "ab_ops"
#include "ab_common.h"

typedef int32_t (*OptsInitFn)(Q4_op_options*);
typedef int32_t (*NvQuantFn)(const DLTensor*, DLTensor*, DLTensor*, int32_t, float, float*,
                             const Q4_op_options*);
typedef int32_t (*Nf4QuantFn)(const DLTensor*, DLTensor*, DLTensor*, int32_t, const Q4_op_options*);
typedef int32_t (*MxQuantFn)(const DLTensor*, DLTensor*, DLTensor*, int32_t, const Q4_op_options*);
typedef int32_t (*LinearFn)(const DLTensor*, const DLTensor*, const DLTensor*, int32_t, float,
                            const DLTensor*, DLTensor*, const Q4_op_options*);
typedef int32_t (*SwizzleFn)(const DLTensor*, DLTensor*);
typedef int32_t (*NvDequantFn)(const DLTensor*, const DLTensor*, int32_t, float, DLTensor*,
                               const Q4_op_options*);
typedef int32_t (*Nf4DequantFn)(const DLTensor*, const NF4_state*, DLTensor*, const Q4_op_options*);
typedef int32_t (*MxDequantFn)(const DLTensor*, const DLTensor*, int32_t, DLTensor*, const Q4_op_options*);
typedef int32_t (*MxLinearFn)(const DLTensor*, const DLTensor*, const DLTensor*, int32_t, const DLTensor*,
                              DLTensor*, const Q4_op_options*);

static void* xalloc(size_t bytes) {
  void* p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == NULL) {
    fprintf(stderr, "ab_ops: out of memory\n");
    exit(3);
  }
  return p;
}

/* Normal random floats (Box-Muller over rand()). */
static void fill_normal(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
    p[i] = (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
  }
}

typedef struct {
  void* lib;
  Q4_op_options opts;
  uint8_t* out[2]; /* codes (or y) and scales */
} Side;

enum {
  kQuantNvfp4,
  kQuantNvfp4Amax,
  kQuantNf4,
  kQuantMxfp4,
  kLinearSwizzled,
  kLinearLinear,
  kLinearMxfp4,
  kDequantNvfp4,
  kDequantNf4,
  kDequantMxfp4
};

/* What every call reads: the operation, the input copies, the products'
   weight (codes, linear and swizzled scales, global scale) and x. */
typedef struct {
  int op;
  int64_t rows, k, m;
  float** in;
  int copies;
  /* The products' weight copies (WCOPIES): codes, linear and swizzled
     NVFP4 scales, MXFP4 codes and E8M0 scales. */
  uint8_t **wq, **ws, **wsw, **mq, **ms;
  int64_t sw_bytes;
  const float* x;
  float g;
  int bf16; /* the quantize input stored as bf16 */
  /* The dequantize ops' codes and scales (NF4: absmax floats), and the
     output's DLPack type. */
  const uint8_t *dq, *ds;
  uint8_t out_code, out_bits;
} Work;

/* One call of a side on input copy `copy`; its status. */
static int32_t call(const Work* w, Side* sd, int copy) {
  const int64_t n = w->rows * w->k;
  int64_t in_shape[2] = {w->rows, w->k}, flat_shape[1] = {n}, q_shape[2] = {w->rows, w->k / 2},
          s_shape[2] = {w->rows, w->k / 16}, mx_shape[2] = {w->rows, w->k / 32}, nf_q[1] = {n / 2},
          nf_a[1] = {n / 64}, sw_shape[1] = {w->sw_bytes}, x_shape[2] = {w->m, w->k},
          y_shape[2] = {w->m, w->rows};
  const uint8_t code = w->bf16 ? kDLBfloat : kDLFloat, bits = w->bf16 ? 16 : 32;
  DLTensor tx = tensor(w->in[w->op <= kQuantMxfp4 ? copy : 0], in_shape, 2, code, bits);
  switch (w->op) {
    case kQuantNvfp4:
    case kQuantNvfp4Amax: {
      DLTensor tq = tensor(sd->out[0], q_shape, 2, kDLUInt, 8),
               ts = tensor(sd->out[1], s_shape, 2, kDLUInt, 8);
      float used = 0.0f;
      const int given = w->op == kQuantNvfp4;
      return ((NvQuantFn)sym(sd->lib, "NVFP4_quantize"))(&tx, &tq, &ts, Q4_SCALE_LINEAR, given ? w->g : 0.0f,
                                                         given ? NULL : &used, &sd->opts);
    }
    case kQuantNf4: {
      DLTensor flat = tensor(w->in[copy], flat_shape, 1, code, bits),
               tq = tensor(sd->out[0], nf_q, 1, kDLUInt, 8), ta = tensor(sd->out[1], nf_a, 1, kDLFloat, 32);
      return ((Nf4QuantFn)sym(sd->lib, "NF4_quantize"))(&flat, &tq, &ta, 64, &sd->opts);
    }
    case kQuantMxfp4: {
      DLTensor tq = tensor(sd->out[0], q_shape, 2, kDLUInt, 8),
               ts = tensor(sd->out[1], mx_shape, 2, kDLUInt, 8);
      return ((MxQuantFn)sym(sd->lib, "MXFP4_quantize"))(&tx, &tq, &ts, Q4_SCALE_LINEAR, &sd->opts);
    }
    case kDequantNvfp4:
    case kDequantMxfp4: {
      const int nv = w->op == kDequantNvfp4;
      DLTensor tq = tensor((void*)w->dq, q_shape, 2, kDLUInt, 8),
               ts = tensor((void*)w->ds, nv ? s_shape : mx_shape, 2, kDLUInt, 8),
               ty = tensor(sd->out[0], in_shape, 2, w->out_code, w->out_bits);
      return nv ? ((NvDequantFn)sym(sd->lib, "NVFP4_dequantize"))(&tq, &ts, Q4_SCALE_LINEAR, w->g, &ty,
                                                                  &sd->opts)
                : ((MxDequantFn)sym(sd->lib, "MXFP4_dequantize"))(&tq, &ts, Q4_SCALE_LINEAR, &ty, &sd->opts);
    }
    case kDequantNf4: {
      DLTensor tq = tensor((void*)w->dq, nf_q, 1, kDLUInt, 8),
               ta = tensor((void*)w->ds, nf_a, 1, kDLFloat, 32),
               ty = tensor(sd->out[0], flat_shape, 1, w->out_code, w->out_bits);
      NF4_state st;
      memset(&st, 0, sizeof st);
      st.struct_size = sizeof st;
      st.blocksize = 64;
      st.absmax = &ta;
      return ((Nf4DequantFn)sym(sd->lib, "NF4_dequantize"))(&tq, &st, &ty, &sd->opts);
    }
    case kLinearMxfp4: {
      DLTensor tq = tensor(w->mq[copy], q_shape, 2, kDLUInt, 8),
               ts = tensor(w->ms[copy], mx_shape, 2, kDLUInt, 8),
               txx = tensor((void*)w->x, x_shape, 2, kDLFloat, 32),
               ty = tensor(sd->out[0], y_shape, 2, kDLFloat, 32);
      return ((MxLinearFn)sym(sd->lib, "MXFP4_linear"))(&txx, &tq, &ts, Q4_SCALE_LINEAR, NULL, &ty,
                                                        &sd->opts);
    }
    default: {
      const int sw = w->op == kLinearSwizzled;
      DLTensor tq = tensor(w->wq[copy], q_shape, 2, kDLUInt, 8),
               ts = sw ? tensor(w->wsw[copy], sw_shape, 1, kDLUInt, 8)
                       : tensor(w->ws[copy], s_shape, 2, kDLUInt, 8),
               txx = tensor((void*)w->x, x_shape, 2, kDLFloat, 32),
               ty = tensor(sd->out[0], y_shape, 2, kDLFloat, 32);
      return ((LinearFn)sym(sd->lib, "NVFP4_linear"))(
          &txx, &tq, &ts, sw ? Q4_SCALE_SWIZZLED : Q4_SCALE_LINEAR, w->g, NULL, &ty, &sd->opts);
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: ab_ops OLD.so NEW.so OP ROWS K [M]\n");
    return 2;
  }
  const char* ops[] = {"quant-nvfp4",   "quant-nvfp4-amax", "quant-nf4",     "quant-mxfp4", "linear-swizzled",
                       "linear-linear", "linear-mxfp4",     "dequant-nvfp4", "dequant-nf4", "dequant-mxfp4"};
  int op = -1;
  for (int i = 0; i < 10; ++i) {
    if (strcmp(argv[3], ops[i]) == 0) op = i;
  }
  const int64_t rows = atoll(argv[4]), k = atoll(argv[5]), m = argc > 6 ? atoll(argv[6]) : 1;
  const int linear_op = op >= kLinearSwizzled && op <= kLinearMxfp4;
  const int copies = op <= kQuantMxfp4 ? (int)env_or("COPIES", 3) : linear_op ? (int)env_or("WCOPIES", 1) : 1;
  const double slice = env_or("SLICE", 0.003);
  const int rounds = (int)env_or("ROUNDS", 40);
  if (op < 0 || rows <= 0 || k <= 0 || k % 64 != 0 || m <= 0 || copies <= 0 || rounds <= 0) {
    fprintf(stderr,
            "ab_ops: OP one of quant-nvfp4, quant-nvfp4-amax, quant-nf4, quant-mxfp4, "
            "linear-swizzled, linear-linear, linear-mxfp4, dequant-nvfp4, dequant-nf4, dequant-mxfp4; ROWS, "
            "M, COPIES, WCOPIES, ROUNDS > 0; K a multiple of 64\n");
    return 2;
  }
  const int64_t n = rows * k;
  srand(1);
  Work w;
  memset(&w, 0, sizeof w);
  w.op = op;
  w.rows = rows;
  w.k = k;
  w.m = m;
  w.copies = copies;
  const int in_copies = op <= kQuantMxfp4 ? copies : 1;
  w.in = xalloc((size_t)in_copies * sizeof(float*));
  w.in[0] = xalloc((size_t)n * 4);
  fill_normal(w.in[0], n);
  for (int c = 1; c < in_copies; ++c) {
    w.in[c] = xalloc((size_t)n * 4);
    memcpy(w.in[c], w.in[0], (size_t)n * 4);
  }
  const char* out_type = getenv("OUT");
  const int out_f32 = out_type != NULL && strcmp(out_type, "f32") == 0,
            out_f16 = out_type != NULL && strcmp(out_type, "f16") == 0;
  w.out_code = out_f32 || out_f16 ? kDLFloat : kDLBfloat;
  w.out_bits = out_f32 ? 32 : 16;
  /* Output sizes: codes n / 2 bytes; scales n / 16 (NVFP4), n / 32 (MXFP4),
     n / 64 floats (NF4); the products' y is M x ROWS floats; the
     dequantized weight n elements. */
  const size_t out0 = op >= kDequantNvfp4     ? (size_t)n * (w.out_bits / 8)
                      : op >= kLinearSwizzled ? (size_t)(m * rows) * 4
                                              : (size_t)n / 2;
  const size_t out1 = op == kQuantMxfp4 ? (size_t)n / 32 : (size_t)n / 16;
  Side side[2];
  const char* paths[2] = {argv[1], argv[2]};
  for (int i = 0; i < 2; ++i) {
    side[i].lib = dlmopen(LM_ID_NEWLM, paths[i], RTLD_NOW | RTLD_LOCAL);
    if (side[i].lib == NULL) {
      fprintf(stderr, "ab_ops: %s\n", dlerror());
      return 2;
    }
    ((OptsInitFn)sym(side[i].lib, "Q4_op_options_init"))(&side[i].opts);
    side[i].opts.num_threads = (int32_t)env_or("T", 2);
    side[i].opts.math_mode = (int32_t)env_or("MODE", 0);
    side[i].out[0] = xalloc(out0);
    side[i].out[1] = xalloc(out1);
  }
  /* The global scale the input's amax gives (quant-nvfp4 passes it in),
     and the products' operands, made once by the new build: the weight's
     codes and linear scales, their swizzled copy, M rows of x. */
  int64_t in_shape[2] = {rows, k}, q_shape[2] = {rows, k / 2}, s_shape[2] = {rows, k / 16};
  w.sw_bytes = ((rows + 127) / 128 * 128) * ((k / 16 + 3) / 4 * 4);
  int64_t sw_shape[1] = {w.sw_bytes};
  uint8_t* wq = xalloc((size_t)n / 2);
  uint8_t* ws = xalloc((size_t)n / 16);
  DLTensor tin = tensor(w.in[0], in_shape, 2, kDLFloat, 32), tq = tensor(wq, q_shape, 2, kDLUInt, 8),
           ts = tensor(ws, s_shape, 2, kDLUInt, 8);
  if (((NvQuantFn)sym(side[1].lib, "NVFP4_quantize"))(&tin, &tq, &ts, Q4_SCALE_LINEAR, 0.0f, &w.g, NULL) !=
      0) {
    fprintf(stderr, "ab_ops: the input did not quantize\n");
    return 2;
  }
  const char* in_type = getenv("IN");
  w.bf16 = in_type != NULL && strcmp(in_type, "bf16") == 0 && op <= kQuantMxfp4;
  for (int c = 0; w.bf16 && c < copies; ++c) {  // (in place: bf16 i lies below float i)
    uint16_t* h = (uint16_t*)w.in[c];
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      memcpy(&u, &w.in[c][i], 4);
      h[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  if (op == kDequantNvfp4) {
    w.dq = wq;
    w.ds = ws;
  } else if (op == kDequantNf4 || op == kDequantMxfp4) {
    uint8_t* dq = xalloc((size_t)n / 2);
    uint8_t* ds = xalloc(op == kDequantNf4 ? (size_t)n / 16 : (size_t)n / 32);
    int64_t nf_q[1] = {n / 2}, nf_a[1] = {n / 64}, flat[1] = {n}, mx_s[2] = {rows, k / 32};
    DLTensor tf = tensor(w.in[0], flat, 1, kDLFloat, 32), tdq = tensor(dq, nf_q, 1, kDLUInt, 8),
             tds = tensor(ds, nf_a, 1, kDLFloat, 32), tmq = tensor(dq, q_shape, 2, kDLUInt, 8),
             tms = tensor(ds, mx_s, 2, kDLUInt, 8);
    const int32_t rc =
        op == kDequantNf4
            ? ((Nf4QuantFn)sym(side[1].lib, "NF4_quantize"))(&tf, &tdq, &tds, 64, NULL)
            : ((MxQuantFn)sym(side[1].lib, "MXFP4_quantize"))(&tin, &tmq, &tms, Q4_SCALE_LINEAR, NULL);
    if (rc != 0) {
      fprintf(stderr, "ab_ops: the weight did not quantize\n");
      return 2;
    }
    w.dq = dq;
    w.ds = ds;
  } else if (linear_op) {
    uint8_t* wsw = xalloc((size_t)w.sw_bytes);
    DLTensor tsw = tensor(wsw, sw_shape, 1, kDLUInt, 8);
    if (((SwizzleFn)sym(side[1].lib, "NVFP4_swizzle_scales"))(&ts, &tsw) != 0) return 2;
    uint8_t* mq = xalloc((size_t)n / 2);
    uint8_t* ms = xalloc((size_t)n / 32);
    int64_t mx_s[2] = {rows, k / 32};
    DLTensor tmq = tensor(mq, q_shape, 2, kDLUInt, 8), tms = tensor(ms, mx_s, 2, kDLUInt, 8);
    if (op == kLinearMxfp4 &&
        ((MxQuantFn)sym(side[1].lib, "MXFP4_quantize"))(&tin, &tmq, &tms, Q4_SCALE_LINEAR, NULL) != 0) {
      fprintf(stderr, "ab_ops: the weight did not quantize\n");
      return 2;
    }
    float* x = xalloc((size_t)(m * k) * 4);
    fill_normal(x, m * k);
    /* WCOPIES copies of each part (the first the originals). */
    uint8_t* first[5] = {wq, ws, wsw, mq, ms};
    const size_t bytes[5] = {(size_t)n / 2, (size_t)n / 16, (size_t)w.sw_bytes, (size_t)n / 2,
                             (size_t)n / 32};
    uint8_t*** parts[5] = {&w.wq, &w.ws, &w.wsw, &w.mq, &w.ms};
    for (int p = 0; p < 5; ++p) {
      *parts[p] = xalloc((size_t)copies * sizeof(uint8_t*));
      (*parts[p])[0] = first[p];
      for (int c = 1; c < copies; ++c) {
        (*parts[p])[c] = xalloc(bytes[p]);
        memcpy((*parts[p])[c], first[p], bytes[p]);
      }
    }
    w.x = x;
  }
  double* t[2] = {xalloc((size_t)rounds * sizeof(double)), xalloc((size_t)rounds * sizeof(double))};
  int next = 0;
  for (int r = -3; r < rounds; ++r) { /* (three rounds of warm-up) */
    for (int a = 0; a < 2; ++a) {
      const int i = (a + r + 3) % 2;
      int calls = 0;
      const double t0 = now_s();
      double e = 0;
      do {
        const int32_t rc = call(&w, &side[i], next);
        if (rc != 0) {
          fprintf(stderr, "ab_ops: %s: status %d\n", paths[i], rc);
          return 1;
        }
        next = (next + 1) % copies;
        ++calls;
        e = now_s() - t0;
      } while (e < slice);
      if (r >= 0) t[i][r] = e / calls;
    }
  }
  const int same = memcmp(side[0].out[0], side[1].out[0], out0) == 0 &&
                   (op >= kLinearSwizzled || memcmp(side[0].out[1], side[1].out[1], out1) == 0);
  const char* out_name = out_f32 ? " to f32" : out_f16 ? " to f16" : " to bf16";
  qsort(t[0], (size_t)rounds, sizeof(double), by_value);
  qsort(t[1], (size_t)rounds, sizeof(double), by_value);
  printf("%s%s %lld x %lld M %lld mode %d: old %.4f ms new %.4f ms (medians) | old/new %.3f | bytes %s\n",
         argv[3],
         w.bf16                ? " (bf16 input)"
         : op >= kDequantNvfp4 ? out_name
                               : "",
         (long long)rows, (long long)k, (long long)m, side[0].opts.math_mode, t[0][rounds / 2] * 1e3,
         t[1][rounds / 2] * 1e3, t[0][rounds / 2] / t[1][rounds / 2], same ? "same" : "DIFFER");
  return same ? 0 : 1;
}
