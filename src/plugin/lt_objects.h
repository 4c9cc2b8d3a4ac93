// cuBLASLt object ownership and GEMM setup, written against an injectable
// API so that it compiles without CUDA headers and is tested on the CPU
// (tests/test_cuda_seams.cpp, with a fake that counts objects and fails a
// chosen call). The plugin instantiates it with the real cuBLASLt
// (cuda/lt_gemm.cu: RealLt).
//
// An Api type provides:
//   using Status, Desc, Layout, Pref, Algo;  static constexpr Status kOk;
//   Status desc_create(Desc*);                       // fp32 compute, fp32 scale type
//   Status desc_set(Desc, LtDescAttr, const LtDescValue&);
//   Status layout_create(Layout*, LtElem, int64_t rows, int64_t cols, int64_t ld);
//   Status pref_create(Pref*);
//   Status pref_set_workspace(Pref, size_t bytes);
//   Status pref_set_alignment(Pref, LtOperand, uint32_t bytes);  // MIN_ALIGNMENT_*_BYTES
//   Status heuristic(Desc, Layout a, Layout b, Layout c, Pref, Algo*, int* found);
//   void destroy(Desc); void destroy(Layout); void destroy(Pref);
// Handles are value-initialized (null) when empty; a failing create leaves
// the handle null.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "plugin/seams.h"

namespace q4::cuda {

// Operand element kinds: fp32; E2M1 with VEC16_UE4M3 block scales (NVFP4);
// E2M1 with VEC32_UE8M0 block scales (MXFP4). Both FP4 kinds are
// CUDA_R_4F_E2M1 layouts; they differ in the descriptor's scale modes.
enum class LtElem { kF32, kFp4E2M1, kFp4E2M1Mx };

inline bool lt_is_fp4(LtElem e) {
  return e != LtElem::kF32;
}

enum class LtDescAttr {
  kTransA,
  kTransB,
  kAScaleModeVec16Ue4m3,
  kBScaleModeVec16Ue4m3,
  kAScaleModeVec32Ue8m0,
  kBScaleModeVec32Ue8m0,
  kAScalePointer,
  kBScalePointer
};

enum class LtOperand { kA, kB, kC, kD };

// Largest power of two (at most 256) dividing the address: what cuBLASLt's
// MIN_ALIGNMENT_*_BYTES preferences describe. A heuristic answer obtained
// with the default preference assumes 256-byte aligned operands and may
// refuse (or be invalid for) a packed tensor at an odd byte offset.
inline uint32_t pointer_alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && v % (uintptr_t{a} * 2) == 0) a *= 2;
  return a;
}

struct LtAlignment {
  uint32_t a = 256, b = 256, c = 256, d = 256;
};

inline LtAlignment lt_alignment(const void* a, const void* b, const void* c) {
  LtAlignment al;
  al.a = pointer_alignment(a);
  al.b = pointer_alignment(b);
  al.c = pointer_alignment(c);
  al.d = al.c;  // D is C (in place)
  return al;
}

// What one heuristic answer is valid for: the shape, output stride,
// element kind and the operands' alignment.
struct LtAlgoKey {
  int64_t m = 0, n = 0, k = 0, ldc = 0;
  int32_t elem = 0;  // LtElem of A and B
  int32_t scale_layout = 0;
  LtAlignment align;
  auto tie() const {
    return std::make_tuple(m, n, k, ldc, elem, scale_layout, align.a, align.b, align.c, align.d);
  }
  bool operator<(const LtAlgoKey& o) const { return tie() < o.tie(); }
};

// Heuristic answers per key, including "no algorithm" (so that a device
// without FP4 GEMMs is asked once per key, not on every call). Thread-safe.
template <class Algo>
class LtAlgoCache {
 public:
  enum class State { kUnknown, kNone, kFound };
  State find(const LtAlgoKey& key, Algo* algo) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end()) return State::kUnknown;
    if (!it->second.first) return State::kNone;
    *algo = it->second.second;
    return State::kFound;
  }
  void put(const LtAlgoKey& key, bool found, const Algo& algo) {
    std::lock_guard<std::mutex> lock(mu_);
    map_[key] = std::make_pair(found, algo);
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }

 private:
  mutable std::mutex mu_;
  std::map<LtAlgoKey, std::pair<bool, Algo>> map_;
};

struct LtDescValue {
  bool transpose = false;         // kTransA / kTransB
  const void* pointer = nullptr;  // kAScalePointer / kBScalePointer
};

// One owned cuBLASLt object: destroyed exactly once, on scope exit, by
// whichever path leaves the scope.
template <class Api, class H>
class LtOwned {
 public:
  LtOwned() = default;
  ~LtOwned() { reset(); }
  LtOwned(const LtOwned&) = delete;
  LtOwned& operator=(const LtOwned&) = delete;
  LtOwned(LtOwned&& o) noexcept : api_(o.api_), h_(o.h_) { o.h_ = H{}; }
  LtOwned& operator=(LtOwned&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      h_ = o.h_;
      o.h_ = H{};
    }
    return *this;
  }
  // Slot for a create function: releases what was held, remembers the api.
  H* slot(Api& api) {
    reset();
    api_ = &api;
    return &h_;
  }
  H get() const { return h_; }
  explicit operator bool() const { return h_ != H{}; }
  void reset() {
    if (h_ != H{} && api_ != nullptr) api_->destroy(h_);
    h_ = H{};
  }

 private:
  Api* api_ = nullptr;
  H h_{};
};

// Everything one cublasLtMatmul call needs besides the data pointers.
template <class Api>
struct LtGemm {
  LtOwned<Api, typename Api::Desc> desc;
  LtOwned<Api, typename Api::Layout> a, b, c;
  void reset() {
    c.reset();
    b.reset();
    a.reset();
    desc.reset();
  }
};

// Outcome of a setup step: the status and the name of the failing call.
template <class Api>
struct LtResult {
  typename Api::Status status = Api::kOk;
  const char* step = "";
  bool ok() const { return status == Api::kOk; }
};

// Builds the descriptor and layouts of the row-major Y[M,N] = X[M,K] .
// W[N,K]^T product in cuBLASLt's column-major terms (A = W, B = X, TN; see
// lt_fp4_gemm_params). ab = kFp4E2M1 adds VEC16_UE4M3 block scaling with
// the given (swizzled) scale buffers of A (= W) and B (= X), kFp4E2M1Mx
// VEC32_UE8M0 scaling (MXFP4). C is fp32.
// On failure `out` holds nothing (every object created so far is destroyed).
template <class Api>
LtResult<Api> lt_build_gemm(Api& api, const LtGemmParams& p, LtElem ab, const void* a_scale,
                            const void* b_scale, LtGemm<Api>& out) {
  out.reset();
  LtResult<Api> r;
  auto step = [&](typename Api::Status s, const char* name) {
    if (r.ok() && s != Api::kOk) {
      r.status = s;
      r.step = name;
    }
    return r.ok();
  };
  auto set = [&](LtDescAttr attr, LtDescValue v, const char* name) {
    return step(api.desc_set(out.desc.get(), attr, v), name);
  };
  LtDescValue ta, tb;
  ta.transpose = p.trans_a;
  tb.transpose = p.trans_b;
  bool ok = step(api.desc_create(out.desc.slot(api)), "cublasLtMatmulDescCreate") &&
            set(LtDescAttr::kTransA, ta, "cublasLtMatmulDescSetAttribute(TRANSA)") &&
            set(LtDescAttr::kTransB, tb, "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (ok && lt_is_fp4(ab)) {
    LtDescValue as, bs;
    as.pointer = a_scale;
    bs.pointer = b_scale;
    const bool mx = ab == LtElem::kFp4E2M1Mx;
    ok = set(mx ? LtDescAttr::kAScaleModeVec32Ue8m0 : LtDescAttr::kAScaleModeVec16Ue4m3, {},
             "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)") &&
         set(mx ? LtDescAttr::kBScaleModeVec32Ue8m0 : LtDescAttr::kBScaleModeVec16Ue4m3, {},
             "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)") &&
         set(LtDescAttr::kAScalePointer, as, "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)") &&
         set(LtDescAttr::kBScalePointer, bs, "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
  }
  ok = ok &&
       step(api.layout_create(out.a.slot(api), ab, p.a_rows, p.a_cols, p.lda),
            "cublasLtMatrixLayoutCreate(A)") &&
       step(api.layout_create(out.b.slot(api), ab, p.b_rows, p.b_cols, p.ldb),
            "cublasLtMatrixLayoutCreate(B)") &&
       step(api.layout_create(out.c.slot(api), LtElem::kF32, p.c_rows, p.c_cols, p.ldc),
            "cublasLtMatrixLayoutCreate(C)");
  if (!ok) out.reset();
  return r;
}

// Asks the heuristic for one algorithm of `gemm` within `workspace_bytes`.
// *found is 0 when cuBLASLt has none (not an error); the preference object
// lives only inside this call.
template <class Api>
LtResult<Api> lt_find_algo(Api& api, const LtGemm<Api>& gemm, size_t workspace_bytes,
                           const LtAlignment& align, typename Api::Algo* algo, int* found) {
  *found = 0;
  LtResult<Api> r;
  LtOwned<Api, typename Api::Pref> pref;
  typename Api::Status s = api.pref_create(pref.slot(api));
  if (s != Api::kOk) {
    r.status = s;
    r.step = "cublasLtMatmulPreferenceCreate";
    return r;
  }
  s = api.pref_set_workspace(pref.get(), workspace_bytes);
  if (s != Api::kOk) {
    r.status = s;
    r.step = "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)";
    return r;
  }
  const std::pair<LtOperand, uint32_t> aligns[] = {
      {LtOperand::kA, align.a}, {LtOperand::kB, align.b}, {LtOperand::kC, align.c}, {LtOperand::kD, align.d}};
  for (const auto& al : aligns) {
    s = api.pref_set_alignment(pref.get(), al.first, al.second);
    if (s != Api::kOk) {
      r.status = s;
      r.step = "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_BYTES)";
      return r;
    }
  }
  s = api.heuristic(gemm.desc.get(), gemm.a.get(), gemm.b.get(), gemm.c.get(), pref.get(), algo, found);
  if (s != Api::kOk) *found = 0;  // no usable result; the caller decides (fallback or UNSUPPORTED)
  return r;
}

// The descriptor, layouts and algorithm of one GEMM, through `cache`. A key
// cached as "no algorithm" returns *available = false without any cuBLASLt
// call (no descriptor built, no heuristic asked). Otherwise the GEMM is
// built into `g`, and the algorithm comes from the cache or from one
// heuristic query whose answer (found or not) is cached.
template <class Api>
LtResult<Api> lt_plan_gemm(Api& api, LtAlgoCache<typename Api::Algo>& cache, const LtAlgoKey& key,
                           const LtGemmParams& p, LtElem ab, const void* a_scale, const void* b_scale,
                           size_t workspace_bytes, LtGemm<Api>& g, typename Api::Algo* algo,
                           bool* available) {
  *available = false;
  const auto state = cache.find(key, algo);
  if (state == LtAlgoCache<typename Api::Algo>::State::kNone) return LtResult<Api>{};
  LtResult<Api> r = lt_build_gemm(api, p, ab, a_scale, b_scale, g);
  if (!r.ok()) return r;
  if (state == LtAlgoCache<typename Api::Algo>::State::kFound) {
    *available = true;
    return r;
  }
  int found = 0;
  r = lt_find_algo(api, g, workspace_bytes, key.align, algo, &found);
  if (!r.ok()) return r;  // a setup failure is not an answer: not cached
  cache.put(key, found > 0, *algo);
  *available = found > 0;
  return r;
}

}  // namespace q4::cuda
