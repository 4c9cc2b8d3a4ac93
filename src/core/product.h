// The one product path of the CPU backend. A PreparedWeight is a weight in
// the backend's ready form; compute_product() multiplies by it. The
// stateless products (NVFP4_linear, NF4_scaled_mm, NVFP4_scaled_mm) build a
// borrowing PreparedWeight per call, a linear (Q4_linear_forward) owns one
// built at prepare time; both then run run_host_product().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "core/op_desc.h"
#include "kernels/kernel_table.h"

namespace q4::kern {
struct ScaleSigns;
}  // namespace q4::kern

namespace q4::core {

// Immutable once built. Owning (a linear's: buffers counted in its session)
// or borrowing (a stateless call's: views of the caller's tensors plus
// uncounted scratch for what had to be converted: unswizzled scales,
// resolved NF4 absmax, the fp32 weight of dequant-matmul).
struct PreparedWeight {
  int32_t format = Q4_FORMAT_NVFP4;
  int64_t n = 0, k = 0;
  CpuPath path = CpuPath::Kernel;
  const uint8_t* q = nullptr;      // packed codes
  const uint8_t* s = nullptr;      // NVFP4 E4M3 scales, linear [N, K/16] (see e8m0_scales)
  float g = 1.0f;                  // NVFP4 global scale
  const float* absmax = nullptr;   // NF4 fp32 absmax per block
  float lut[16] = {};              // NF4 code values
  int64_t blocksize = 64;          // NF4
  int32_t block_shift = 6;         // log2(blocksize)
  const float* dequant = nullptr;  // fp32 [N, K] (dequant-matmul)
  const float* bias = nullptr;     // fp32 [N] (linears)
  // NVFP4 (and MXFP4 in its NVFP4 form) or NF4 codes again in the tile
  // order of kern::i8_tile_codes: a CPU linear in fast mode whose table
  // reads them (KernelTable::i8_reads_tiles), K % 128 == 0, N >= 16.
  const uint8_t* tiles = nullptr;
  const float* tile_absmax = nullptr;    // NF4 with tiles, K % blocksize == 0: kern::i8_tile_absmax
  const uint8_t* tile_scales = nullptr;  // E4M3 scales with tiles: kern::i8_tile_scales
  const uint8_t* tile_flags = nullptr;   // its flag byte per group of 16 rows
  // A linear of a CUDA session: every pointer above is CUDA device or
  // managed memory on `device` (never dereferenced on the host), NF4 keeps
  // its 16 code values there too.
  bool on_device = false;
  bool managed = false;
  int32_t device = 0;
  const float* quant_map = nullptr;  // NF4 on a device: the 16 code values
  // MXFP4 in its raw form (a linear of a CUDA session, whose plugin runs
  // its own MXFP4 linear on it): q = the packed codes [N, K/2] as given, s
  // = the E8M0 scales in the linear layout [N, K/32] (swizzled bundles are
  // unswizzled on the host), g unused. False: an MXFP4 weight is in a CPU
  // ready form (the NVFP4 form, s = E4M3 [N, K/16] under g, or dequant).
  bool e8m0_scales = false;
  // A borrowed MXFP4 weight of a stateless product whose scales all lie in
  // the window: s is null, its E8M0 scales [N, K/32] are read in place
  // under g = 2^e8m0_t (kern::NvWeights::e8m0).
  const uint8_t* e8m0 = nullptr;
  int32_t e8m0_t = 0;
  // A borrowed NVFP4 weight of a stateless product on the kernels whose
  // caller gave swizzled scales: s is null, the kernels' drivers unswizzle
  // these piece by piece (kern::NvWeights::swizzled).
  const uint8_t* swizzled = nullptr;
  std::vector<std::unique_ptr<Buffer>> storage;
  // Copies of the caller's bytes not made yet: with defer_copies set
  // (before prepare_nvfp4 / prepare_nf4), those copy into their own
  // buffers later, so that a fast-mode linear's tiling copies them in its
  // one pass over the caller's bytes (prepare_tiles); finish_copies makes
  // any still pending. dst is q (q_copy) or s (s_copy).
  struct PendingCopy {
    uint8_t* dst = nullptr;
    const uint8_t* src = nullptr;
    int64_t bytes = 0;
    bool reused = false;  // dst a retired weight's memory (copy_bytes)
  };
  bool defer_copies = false;
  PendingCopy q_copy, s_copy;
  // Host buffers a preparation may take instead of allocating (a linear's
  // update passes the storage of a weight it retired: take_buffer), each
  // taken for a request of exactly its size; prepare() frees the rest.
  std::vector<std::unique_ptr<Buffer>> reuse;

  int64_t bytes() const;
  kern::NvWeights nv() const {
    return kern::NvWeights{q, s, g, k, nullptr, tiles, tile_scales, tile_flags, e8m0, e8m0_t, swizzled};
  }
  kern::Nf4Weights nf4() const {
    return kern::Nf4Weights{q, absmax, lut, k, blocksize, block_shift, tiles, tile_absmax};
  }
};

// A host buffer of `bytes` bytes for `w`: one of w.reuse of that size
// (*reused set, where given), or a new one counted in `counters` when that
// is not null.
std::unique_ptr<Buffer> take_buffer(PreparedWeight& w, const std::shared_ptr<SessionCounters>& counters,
                                    int64_t bytes, bool* reused = nullptr);
// bytes from src to dst over `threads` (0: the default), in pieces of 1
// MiB, when there are at least 4 MiB: one core's copy does not reach the
// memory's bandwidth (a linear's weight copied at create and update).
// With `stream`, such a large copy writes dst by non-temporal stores
// (kern::stream_copy): for memory unlikely to be in the cache, whose
// lines ordinary stores would read before writing them. Linears pass it
// for a retired weight's memory (take_buffer's *reused: rarely still in
// the cache when the next update comes), not for fresh memory (the kernel
// has just zeroed its pages through the cache); mutable tensors for a
// large spare version.
void copy_bytes(uint8_t* dst, const uint8_t* src, int64_t bytes, int32_t threads, bool stream = false);
// Makes w's pending copies (PreparedWeight::q_copy, s_copy) by copy_bytes.
void finish_copies(PreparedWeight& w, int32_t threads);
// A buffer owned by `w` (take_buffer's).
uint8_t* allocate(PreparedWeight& w, const std::shared_ptr<SessionCounters>& counters, int64_t bytes,
                  bool* reused = nullptr);

// The packed parts from a validated operand. copy = true copies the bytes
// into w's storage (linears); false borrows the caller's memory. Swizzled
// scales are made linear on `threads` threads, or with keep_swizzled
// (borrowed weights of products on the kernels only) borrowed as they are
// (PreparedWeight::swizzled).
void prepare_nvfp4(PreparedWeight& w, const Nvfp4Operand& op, bool copy,
                   const std::shared_ptr<SessionCounters>& counters, int32_t threads,
                   bool keep_swizzled = false);
// (double-quantized absmax resolved into fp32 on `threads` threads)
void prepare_nf4(PreparedWeight& w, const Nf4Operand& op, int64_t n, int64_t k, bool copy,
                 const std::shared_ptr<SessionCounters>& counters, int32_t threads);
// The dequant-matmul ready form: the fp32 weight; the packed form is dropped.
void prepare_dequant(PreparedWeight& w, int32_t threads, const std::shared_ptr<SessionCounters>& counters);
// The borrowing weight of a validated stateless product.
void borrow_weight(PreparedWeight& w, const ProductDesc& d);

// y[m, n] = act[m, k] . W^T in fp32 along w's path (no scaling, no bias).
// act: fp32, fp16 or bf16 rows, read by the kernels in their own type.
// signs: NVFP4's sign rule checked on the way (kern::ScaleSigns), or null.
void compute_product(const PreparedWeight& w, kern::ActRows act, int64_t m, int32_t math_mode,
                     int32_t threads, float* y, kern::ScaleSigns* signs = nullptr);

// A validated host product end to end: the activations as they are (fp32,
// fp16 or bf16, converted inside the kernels; W4A4: A decoded exactly),
// compute_product, alpha, bias (the call's, else w.bias), conversion into
// out. Returns true when the activations had to be copied (an implicit
// copy; no host path copies them today).
bool run_host_product(const PreparedWeight& w, const ProductDesc& d);

// The fp32 staging of a product with a 16-bit output, in bytes (64 MiB):
// above it, y is computed in bands of rows (run_host_product).
constexpr int64_t kOutStageBytes = int64_t{64} << 20;

}  // namespace q4::core
