#include "kernels/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "common/thread_pool.h"
#include "formats/codec.h"

namespace q4::kern {
namespace {

std::atomic<int64_t> g_kc{256};
std::atomic<int64_t> g_mc{96};

struct AlignedDelete {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using PanelBuffer = std::unique_ptr<float[], AlignedDelete>;

PanelBuffer make_panel(int64_t floats) {
  return PanelBuffer(static_cast<float*>(
      ::operator new[](static_cast<size_t>(floats) * sizeof(float), std::align_val_t(64))));
}

int32_t threads_or_default(int32_t threads) {
  return threads > 0 ? threads : default_num_threads();
}

// Tasks of `chunk` rows of N, at least one row each.
int64_t gemv_chunk(int64_t n, int32_t threads) {
  const int64_t tasks = std::max<int64_t>(1, 4 * threads_or_default(threads));
  return std::max<int64_t>(16, (n + tasks - 1) / tasks);
}

template <class Pack>
void panel_gemm(const KernelTable& kt, const float* x, int64_t m, int64_t k, int64_t n, float* y,
                int32_t threads, const GemmBlocking& b, const Pack& pack) {
  const int32_t nr = kt.panel_nr;
  const int64_t kc = std::max<int64_t>(16, b.kc / 16 * 16);
  const int64_t mc = std::max<int64_t>(kt.micro_mr, b.mc);
  const int64_t nblocks = (n + nr - 1) / nr;
  // Rows of X a power-of-two size apart map to the same L1 sets (4K
  // aliasing) and evict each other inside the micro-kernel; copy X once with
  // its rows padded by a cache line.
  std::vector<float> padded;
  int64_t ldx = k;
  if (m == 0 || n == 0 || k == 0) return;
  if (m > kt.micro_mr && (k * 4) % 4096 == 0) {
    ldx = k + 16;
    padded.resize(static_cast<size_t>(m * ldx));
    parallel_for(m, threads,
                 [&](int64_t i) { std::copy(x + i * k, x + i * k + k, padded.data() + i * ldx); });
    x = padded.data();
  }
  parallel_for(nblocks, threads, [&](int64_t t) {
    const int64_t n0 = t * nr;
    const int32_t rows = static_cast<int32_t>(std::min<int64_t>(nr, n - n0));
    PanelBuffer panel = make_panel(kc * nr);
    for (int64_t i0 = 0; i0 < m; i0 += mc) {
      const int64_t i1 = std::min(m, i0 + mc);
      for (int64_t k0 = 0; k0 < k; k0 += kc) {
        const int64_t kcur = std::min(kc, k - k0);
        pack(n0, rows, k0, kcur, panel.get());
        for (int64_t i = i0; i < i1; i += kt.micro_mr) {
          const int32_t mr = static_cast<int32_t>(std::min<int64_t>(kt.micro_mr, i1 - i));
          kt.gemm_micro(x + i * ldx + k0, ldx, mr, panel.get(), kcur, y + i * n + n0, n, rows, k0 > 0);
        }
      }
    }
  });
}

// Per-block int8 activations: xq [m, k] and xs [m, k/16] (k % 16 == 0 is
// not required: a short last block is allowed).
struct QuantizedActivations {
  std::vector<int8_t> q;
  std::vector<float> scale;
  int64_t blocks_per_row = 0;
};

QuantizedActivations quantize_activations(const float* x, int64_t m, int64_t k, int32_t threads) {
  QuantizedActivations a;
  a.blocks_per_row = (k + 15) / 16;
  a.q.resize(static_cast<size_t>(m * k));
  a.scale.resize(static_cast<size_t>(m * a.blocks_per_row));
  parallel_for(m, threads, [&](int64_t i) {
    for (int64_t b = 0; b < a.blocks_per_row; ++b) {
      const int64_t k0 = b * 16, k1 = std::min(k, k0 + 16);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t kk = k0; kk < k1; ++kk) {
        finite = finite && std::isfinite(x[i * k + kk]);
        amax = std::max(amax, std::fabs(x[i * k + kk]));
      }
      // A NaN/Inf activation makes its block's scale NaN, so the outputs it
      // feeds become NaN as in exact mode (and no float->int conversion of a
      // non-finite value happens).
      const float scale = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      a.scale[static_cast<size_t>(i * a.blocks_per_row + b)] = scale;
      for (int64_t kk = k0; kk < k1; ++kk) {
        int8_t code = 0;
        if (finite && scale > 0.0f) {
          const float v = std::min(127.0f, std::max(-127.0f, x[i * k + kk] / scale));
          code = static_cast<int8_t>(static_cast<int32_t>(v + (v < 0.0f ? -0.5f : 0.5f)));
        }
        a.q[static_cast<size_t>(i * k + kk)] = code;
      }
    }
  });
  return a;
}

}  // namespace

void linear_nvfp4_fast(const float* x, int64_t m, const NvWeights& w, int64_t n, float* y, int32_t threads) {
  const int64_t k = w.k;
  const QuantizedActivations a = quantize_activations(x, m, k, threads);
  const int64_t chunk = gemv_chunk(n, threads);
  parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t t) {
    const int64_t n0 = t * chunk, n1 = std::min(n, n0 + chunk);
    std::vector<int8_t> wrow(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      const uint8_t* q = w.q + j * (k / 2);
      for (int64_t kk = 0; kk < k; kk += 2) {
        wrow[static_cast<size_t>(kk)] = static_cast<int8_t>(fmt::e2m1_decode_x2(q[kk / 2] & 0xfu));
        wrow[static_cast<size_t>(kk + 1)] = static_cast<int8_t>(fmt::e2m1_decode_x2(q[kk / 2] >> 4));
      }
      for (int64_t i = 0; i < m; ++i) {
        const int8_t* xq = a.q.data() + i * k;
        const float* xs = a.scale.data() + i * a.blocks_per_row;
        float acc = 0.0f;
        for (int64_t b = 0; b < k / 16; ++b) {
          int32_t dot = 0;
          for (int e = 0; e < 16; ++e) dot += int32_t{xq[b * 16 + e]} * wrow[static_cast<size_t>(b * 16 + e)];
          acc += static_cast<float>(dot) * (xs[b] * fmt::e4m3_decode(w.s[j * (k / 16) + b]));
        }
        y[i * n + j] = acc * (0.5f * w.g);  // e2m1 x2 -> e2m1
      }
    }
  });
}

void linear_nf4_fast(const float* x, int64_t m, const Nf4Weights& w, int64_t n, float* y, int32_t threads) {
  const int64_t k = w.k;
  const QuantizedActivations a = quantize_activations(x, m, k, threads);
  const int64_t chunk = gemv_chunk(n, threads);
  parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t t) {
    const int64_t n0 = t * chunk, n1 = std::min(n, n0 + chunk);
    std::vector<float> wrow(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t f = j * k + kk;
        const uint8_t byte = w.q[f >> 1];
        const uint32_t code = (f & 1) ? (byte & 0xfu) : (byte >> 4);
        wrow[static_cast<size_t>(kk)] = w.lut[code] * w.absmax[f >> w.block_shift];
      }
      for (int64_t i = 0; i < m; ++i) {
        const int8_t* xq = a.q.data() + i * k;
        const float* xs = a.scale.data() + i * a.blocks_per_row;
        float acc = 0.0f;
        for (int64_t b = 0; b < a.blocks_per_row; ++b) {
          float part = 0.0f;
          for (int64_t kk = b * 16; kk < std::min(k, b * 16 + 16); ++kk) {
            part += static_cast<float>(xq[kk]) * wrow[static_cast<size_t>(kk)];
          }
          acc += part * xs[b];
        }
        y[i * n + j] = acc;
      }
    }
  });
}

GemmBlocking gemm_blocking() {
  GemmBlocking b;
  b.kc = g_kc.load(std::memory_order_relaxed);
  b.mc = g_mc.load(std::memory_order_relaxed);
  return b;
}

void set_gemm_blocking(const GemmBlocking& b) {
  g_kc.store(b.kc, std::memory_order_relaxed);
  g_mc.store(b.mc, std::memory_order_relaxed);
}

namespace {

// Shared driver of the 4-bit products: the fused GEMV for small M, split
// over N; the packed-panel GEMM otherwise. `Weights` is NvWeights or
// Nf4Weights; gemv/panel are the matching kernel-table entries.
template <class Weights, class Gemv, class Panel>
void linear_packed(const KernelTable& kt, const float* x, int64_t m, const Weights& w, int64_t n, float* y,
                   int32_t threads, Gemv gemv, Panel panel) {
  if (m <= kGemvMaxRows) {
    const int64_t chunk = gemv_chunk(n, threads);
    parallel_for((n + chunk - 1) / chunk, threads, [&](int64_t t) {
      const int64_t n0 = t * chunk, n1 = std::min(n, n0 + chunk);
      gemv(x, w.k, static_cast<int32_t>(m), w, n0, n1, y + n0, n);
    });
    return;
  }
  panel_gemm(
      kt, x, m, w.k, n, y, threads, gemm_blocking(),
      [&](int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* buf) { panel(w, n0, rows, k0, kc, buf); });
}

}  // namespace

void linear_nvfp4(const KernelTable& kt, const float* x, int64_t m, const NvWeights& w, int64_t n, float* y,
                  int32_t threads) {
  linear_packed(kt, x, m, w, n, y, threads, kt.nvfp4_gemv, kt.nvfp4_panel);
}

void linear_nf4(const KernelTable& kt, const float* x, int64_t m, const Nf4Weights& w, int64_t n, float* y,
                int32_t threads) {
  linear_packed(kt, x, m, w, n, y, threads, kt.nf4_gemv, kt.nf4_panel);
}

void gemm_f32(const KernelTable& kt, const float* x, int64_t m, int64_t k, const float* w, int64_t n,
              float* y, int32_t threads, const GemmBlocking& blocking) {
  panel_gemm(kt, x, m, k, n, y, threads, blocking,
             [&](int64_t n0, int32_t rows, int64_t k0, int64_t kc, float* panel) {
               kt.f32_panel(w, k, n0, rows, k0, kc, panel);
             });
}

void quantize_nvfp4(const KernelTable& kt, const float* x, int64_t rows, int64_t k, float g, uint8_t* q,
                    uint8_t* s, int32_t threads) {
  if (rows == 0 || k == 0) return;  // nothing to do (and no empty rows to loop over)
  // Chunks of whole rows, at least 64 KiB of input each.
  const int64_t rows_per = std::max<int64_t>(1, (16384 + k - 1) / std::max<int64_t>(k, 1));
  parallel_for((rows + rows_per - 1) / rows_per, threads, [&](int64_t t) {
    const int64_t r0 = t * rows_per, r1 = std::min(rows, r0 + rows_per);
    kt.nvfp4_quantize(x + r0 * k, r1 - r0, k, g, q + r0 * (k / 2), s + r0 * (k / 16));
  });
}

void dequantize_nvfp4(const KernelTable& kt, const uint8_t* q, const uint8_t* s, float g, int64_t rows,
                      int64_t k, float* out, int32_t threads) {
  if (rows == 0 || k == 0) return;
  const int64_t rows_per = std::max<int64_t>(1, (16384 + k - 1) / std::max<int64_t>(k, 1));
  parallel_for((rows + rows_per - 1) / rows_per, threads, [&](int64_t t) {
    const int64_t r0 = t * rows_per, r1 = std::min(rows, r0 + rows_per);
    kt.nvfp4_dequantize(q + r0 * (k / 2), s + r0 * (k / 16), g, r1 - r0, k, out + r0 * k);
  });
}

float amax(const KernelTable& kt, const float* x, int64_t n, int32_t threads) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  std::vector<float> part(static_cast<size_t>(std::max<int64_t>(tasks, 1)), 0.0f);
  parallel_for(tasks, threads, [&](int64_t t) {
    const int64_t i0 = t * kChunk;
    part[static_cast<size_t>(t)] = kt.amax(x + i0, std::min(kChunk, n - i0));
  });
  float m = 0.0f;
  for (float v : part) m = std::max(m, v);
  return m;
}

}  // namespace q4::kern
