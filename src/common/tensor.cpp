#include "common/tensor.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"

namespace q4 {
namespace {

constexpr int32_t kMaxNdim = 16;

ElemType classify(const DLDataType& dt) {
  if (dt.code == kDLFloat && dt.bits == 32 && dt.lanes == 1) return ElemType::F32;
  if (dt.code == kDLFloat && dt.bits == 16 && dt.lanes == 1) return ElemType::F16;
  if (dt.code == kDLBfloat && dt.bits == 16 && dt.lanes == 1) return ElemType::BF16;
  if (dt.code == kDLUInt && dt.bits == 8 && dt.lanes == 1) return ElemType::U8;
  if (dt.code == kDLFloat8_e4m3fn && dt.bits == 8 && dt.lanes == 1) return ElemType::E4M3;
  if (dt.code == kDLFloat8_e8m0fnu && dt.bits == 8 && dt.lanes == 1) return ElemType::E8M0;
  if (dt.code == kDLFloat4_e2m1fn && dt.bits == 4 && dt.lanes == 1) return ElemType::FP4;
  if (dt.code == kDLFloat4_e2m1fn && dt.bits == 4 && dt.lanes == 2) return ElemType::FP4x2;
  return ElemType::Other;
}

int64_t elem_bytes(ElemType t) {
  switch (t) {
    case ElemType::F32:
      return 4;
    case ElemType::F16:
    case ElemType::BF16:
      return 2;
    default:
      return 1;
  }
}

const char* device_name(int32_t type) {
  switch (type) {
    case kDLCPU:
      return "kDLCPU";
    case kDLCUDA:
      return "kDLCUDA";
    case kDLCUDAHost:
      return "kDLCUDAHost";
    case kDLCUDAManaged:
      return "kDLCUDAManaged";
    default:
      return "other";
  }
}

}  // namespace

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::F32:
      return "float32";
    case ElemType::F16:
      return "float16";
    case ElemType::BF16:
      return "bfloat16";
    case ElemType::U8:
      return "uint8";
    case ElemType::E4M3:
      return "float8_e4m3fn";
    case ElemType::FP4:
      return "float4_e2m1fn";
    case ElemType::FP4x2:
      return "float4_e2m1fn_x2";
    case ElemType::E8M0:
      return "float8_e8m0fnu";
    default:
      return "unsupported";
  }
}

std::string dtype_text(const DLDataType& dt) {
  return "(code " + std::to_string(dt.code) + ", bits " + std::to_string(dt.bits) + ", lanes " +
         std::to_string(dt.lanes) + ")";
}

bool is_float_activation(ElemType t) {
  return t == ElemType::F32 || t == ElemType::F16 || t == ElemType::BF16;
}

int64_t TensorRef::leading() const {
  int64_t r = 1;
  for (int32_t i = 0; i + 1 < ndim; ++i) r *= shape[i];  // bounded by numel
  return r;
}

std::string TensorRef::shape_text() const {
  std::string s = "[";
  for (int32_t i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
TensorRef check_tensor_impl(const DLTensor* t, const char* name, bool allow_cuda);
}  // namespace

TensorRef check_tensor(const DLTensor* t, const char* name) {
  return check_tensor_impl(t, name, false);
}
TensorRef check_tensor_any(const DLTensor* t, const char* name) {
  return check_tensor_impl(t, name, true);
}

namespace {
TensorRef check_tensor_impl(const DLTensor* t, const char* name, bool allow_cuda) {
  if (t == nullptr) fail(Q4_ERR_NULL_POINTER, name, "tensor pointer is NULL");
  TensorRef r;
  r.name = name;
  if (t->ndim < 0 || t->ndim > kMaxNdim) {
    fail(Q4_ERR_SHAPE, name,
         "expected 0 <= ndim <= " + std::to_string(kMaxNdim) + ", got " + std::to_string(t->ndim));
  }
  if (t->ndim > 0 && t->shape == nullptr) fail(Q4_ERR_NULL_POINTER, name, "shape is NULL");
  r.ndim = t->ndim;
  r.shape = t->shape;
  r.type = classify(t->dtype);
  if (r.type == ElemType::Other) {
    fail(Q4_ERR_DTYPE, name, "unsupported dtype " + dtype_text(t->dtype));
  }
  const int32_t dev = t->device.device_type;
  if (dev != kDLCPU && dev != kDLCUDAHost && dev != kDLCUDAManaged && !(allow_cuda && dev == kDLCUDA)) {
    fail(Q4_ERR_DEVICE, name,
         std::string("expected a CPU-accessible device (kDLCPU, kDLCUDAHost, kDLCUDAManaged), "
                     "got ") +
             device_name(dev) + " (" + std::to_string(dev) + ")" +
             (dev == kDLCUDA ? "; device memory needs the CUDA backend, which this call does not use" : ""));
  }
  r.device = t->device;
  int64_t numel = 1;
  for (int32_t i = 0; i < r.ndim; ++i) {
    if (r.shape[i] < 0) {
      fail(Q4_ERR_SHAPE, name,
           "dimension " + std::to_string(i) + " is negative (" + std::to_string(r.shape[i]) + ")");
    }
    numel = checked_mul(numel, r.shape[i], name);
  }
  r.numel = numel;
  if (r.type == ElemType::FP4) {
    if (numel % 2 != 0) {
      fail(Q4_ERR_SHAPE, name,
           "float4_e2m1fn with lanes 1 needs an even number of elements, got " + std::to_string(numel));
    }
    r.nbytes = numel / 2;
  } else {
    r.nbytes = checked_mul(numel, elem_bytes(r.type), name);
  }
  // Sizes beyond 2^62 bytes cannot be addressed; reject before pointer math.
  if (r.nbytes > (int64_t{1} << 62)) fail(Q4_ERR_OVERFLOW, name, "tensor too large");
  if (t->strides != nullptr && numel > 0) {
    int64_t expected = 1;
    for (int32_t i = r.ndim - 1; i >= 0; --i) {
      if (r.shape[i] != 1 && t->strides[i] != expected) {
        fail(Q4_ERR_STRIDES, name,
             "expected compact row-major strides; dimension " + std::to_string(i) + " has stride " +
                 std::to_string(t->strides[i]) + ", expected " + std::to_string(expected));
      }
      expected *= r.shape[i];
    }
  }
  if (t->byte_offset > (uint64_t{1} << 62)) {
    fail(Q4_ERR_OVERFLOW, name, "byte_offset too large: " + std::to_string(t->byte_offset));
  }
  if (r.nbytes > 0 && t->data == nullptr) fail(Q4_ERR_NULL_POINTER, name, "data is NULL");
  const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
  uintptr_t start = 0;
  uintptr_t end = 0;
  if (__builtin_add_overflow(base, static_cast<uintptr_t>(t->byte_offset), &start) ||
      __builtin_add_overflow(start, static_cast<uintptr_t>(r.nbytes), &end)) {
    fail(Q4_ERR_OVERFLOW, name, "data + byte_offset + size wraps the address space");
  }
  const int64_t align = elem_bytes(r.type);
  if (r.nbytes > 0 && start % static_cast<uintptr_t>(align) != 0) {
    fail(Q4_ERR_ALIGNMENT, name,
         std::string("data + byte_offset must be aligned to ") + std::to_string(align) + " bytes for " +
             elem_type_name(r.type));
  }
  r.data = reinterpret_cast<uint8_t*>(start);
  return r;
}
}  // namespace

void require_float(const TensorRef& t) {
  if (!is_float_activation(t.type)) {
    fail(Q4_ERR_DTYPE, t.name,
         std::string("expected float32, float16 or bfloat16, got ") + elem_type_name(t.type));
  }
}

void require_packed_bytes(const TensorRef& t) {
  if (t.type != ElemType::U8 && t.type != ElemType::FP4 && t.type != ElemType::FP4x2) {
    fail(Q4_ERR_DTYPE, t.name,
         std::string("expected packed 4-bit data as uint8 or float4_e2m1fn, got ") + elem_type_name(t.type));
  }
}

void require_scale_bytes(const TensorRef& t) {
  if (t.type != ElemType::U8 && t.type != ElemType::E4M3) {
    fail(Q4_ERR_DTYPE, t.name,
         std::string("expected E4M3 scales as uint8 or float8_e4m3fn, got ") + elem_type_name(t.type));
  }
}

void require_e8m0_bytes(const TensorRef& t) {
  if (t.type != ElemType::U8 && t.type != ElemType::E8M0) {
    fail(Q4_ERR_DTYPE, t.name,
         std::string("expected E8M0 scales as uint8 or float8_e8m0fnu, got ") + elem_type_name(t.type));
  }
}

void require_type(const TensorRef& t, ElemType type) {
  if (t.type != type) {
    fail(Q4_ERR_DTYPE, t.name,
         std::string("expected ") + elem_type_name(type) + ", got " + elem_type_name(t.type));
  }
}

void require_min_ndim(const TensorRef& t, int32_t ndim) {
  if (t.ndim < ndim) {
    fail(Q4_ERR_SHAPE, t.name,
         "expected ndim >= " + std::to_string(ndim) + ", got " + std::to_string(t.ndim));
  }
}

void fail_nbytes(const TensorRef& t, int64_t expected, const std::string& why) {
  fail(Q4_ERR_SHAPE, t.name,
       "expected " + std::to_string(expected) + " bytes (" + why + "), got " + std::to_string(t.nbytes) +
           " bytes with shape " + t.shape_text());
}

void fail_numel(const TensorRef& t, int64_t expected, const std::string& why) {
  fail(Q4_ERR_SHAPE, t.name,
       "expected " + std::to_string(expected) + " elements (" + why + "), got " + std::to_string(t.numel) +
           " with shape " + t.shape_text());
}

void require_no_overlap(const TensorRef& out, std::initializer_list<const TensorRef*> others) {
  if (out.nbytes == 0) return;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(out.data);
  const uintptr_t a1 = a0 + static_cast<uintptr_t>(out.nbytes);
  for (const TensorRef* other : others) {
    if (other == nullptr || other->nbytes == 0) continue;
    const uintptr_t b0 = reinterpret_cast<uintptr_t>(other->data);
    const uintptr_t b1 = b0 + static_cast<uintptr_t>(other->nbytes);
    if (a0 < b1 && b0 < a1) {
      fail(Q4_ERR_ALIASING, out.name, std::string("output memory overlaps argument '") + other->name + "'");
    }
  }
}

namespace {

// Number of elements in [p, p+len) whose exponent bits are all ones: a
// branch-free count the compiler vectorizes (pcmpeq + add).
template <class U>
uint32_t count_non_finite(const uint8_t* p, int64_t len, U mask) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < len; ++i) {
    U w;
    std::memcpy(&w, p + i * static_cast<int64_t>(sizeof(U)), sizeof(U));
    bad += (w & mask) == mask ? 1u : 0u;
  }
  return bad;
}

// Index of the first NaN/Inf among n elements, or -1. Chunks are scanned in
// parallel; only a chunk with a hit is searched element by element.
template <class U>
int64_t first_non_finite(const uint8_t* data, int64_t n, U mask) {
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint32_t> bad(static_cast<size_t>(chunks), 0);
  parallel_for(chunks, 0, [&](int64_t c) {
    const int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
    bad[static_cast<size_t>(c)] = count_non_finite<U>(data + i0 * static_cast<int64_t>(sizeof(U)), len, mask);
  });
  for (int64_t c = 0; c < chunks; ++c) {
    if (bad[static_cast<size_t>(c)] == 0) continue;
    for (int64_t i = c * kChunk; i < n; ++i) {
      U w;
      std::memcpy(&w, data + i * static_cast<int64_t>(sizeof(U)), sizeof(U));
      if ((w & mask) == mask) return i;
    }
  }
  return -1;
}

}  // namespace

void require_finite(const TensorRef& t) {
  int64_t bad = -1;
  if (t.type == ElemType::F32) {
    bad = first_non_finite<uint32_t>(t.data, t.numel, 0x7f800000u);
  } else if (t.type == ElemType::F16) {
    bad = first_non_finite<uint16_t>(t.data, t.numel, static_cast<uint16_t>(0x7c00u));
  } else if (t.type == ElemType::BF16) {
    bad = first_non_finite<uint16_t>(t.data, t.numel, static_cast<uint16_t>(0x7f80u));
  }
  if (bad >= 0) {
    fail(Q4_ERR_NON_FINITE, t.name, "non-finite value (NaN or Inf) at flat index " + std::to_string(bad));
  }
}

}  // namespace q4
