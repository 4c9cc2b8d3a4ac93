// libFuzzer harness over every stateless entry point (NVFP4, NF4, MXFP4)
// and the session / linear / mutable-tensor entry points. The input bytes
// describe DLTensor descriptors (ndim, shapes, strides, byte offsets,
// dtypes, devices, NULL pointers) and the scalar arguments. Each descriptor
// is backed by a buffer of exactly the extent it claims (so ASan flags any
// access beyond it); a descriptor claiming more than 1 MiB gets a NULL or
// unbacked data pointer, which the library must reject before touching
// memory.
//
// Contract checked: a status is returned, nothing crashes or reads/writes
// out of bounds, and inputs are never modified (their bytes are compared
// before and after; a change aborts, which the fuzzer reports).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  int64_t small(int64_t mod) { return mod > 0 ? static_cast<int64_t>(u8()) % mod : 0; }
  float f32() {
    uint32_t u = 0;
    for (int i = 0; i < 4; ++i) u = (u << 8) | u8();
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  bool done() const { return i_ >= n_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

constexpr int64_t kMaxBacked = 1 << 20;

struct FuzzTensor {
  std::vector<int64_t> shape, strides;
  std::unique_ptr<uint8_t[]> storage;
  DLTensor dl{};
  std::vector<uint8_t> before;
  bool backed = false;
  int64_t extent = 0;  // bytes from dl.data the descriptor covers (incl. byte_offset)

  void snapshot() {
    if (backed && extent > 0) before.assign(storage.get(), storage.get() + extent);
  }
  bool unchanged() const {
    return !backed || extent == 0 ||
           std::memcmp(before.data(), storage.get(), static_cast<size_t>(extent)) == 0;
  }
};

DLDataType pick_dtype(Reader& r) {
  static const DLDataType kTypes[] = {
      {kDLFloat, 32, 1},        {kDLFloat, 16, 1},        {kDLBfloat, 16, 1},       {kDLUInt, 8, 1},
      {kDLFloat8_e4m3fn, 8, 1}, {kDLFloat4_e2m1fn, 4, 1}, {kDLFloat4_e2m1fn, 4, 2}, {kDLInt, 32, 1},
      {kDLFloat, 32, 2},        {kDLFloat, 64, 1}};
  return kTypes[r.small(sizeof kTypes / sizeof kTypes[0])];
}

int64_t elem_bits(const DLDataType& dt) {
  return static_cast<int64_t>(dt.bits) * dt.lanes;
}

// Builds a descriptor; `hint` is a plausible shape to start from so that
// deeper validation paths are reached often.
std::unique_ptr<FuzzTensor> make_tensor(Reader& r, std::vector<int64_t> hint, DLDataType hint_dtype) {
  auto t = std::make_unique<FuzzTensor>();
  const uint8_t mode = r.u8();
  t->shape = hint;
  if (mode & 1) {  // mutate the shape
    const int64_t ndim = r.small(5);
    t->shape.assign(static_cast<size_t>(ndim), 0);
    for (auto& d : t->shape) {
      const uint8_t b = r.u8();
      d = (b & 0x80) ? -static_cast<int64_t>(b & 3) : (b & 0x40 ? (int64_t{1} << (20 + (b & 31))) : (b & 63));
    }
  } else if (mode & 2) {
    if (!t->shape.empty()) t->shape.back() += r.small(33) - 16;
  }
  t->dl.dtype = (mode & 4) ? pick_dtype(r) : hint_dtype;
  t->dl.ndim = static_cast<int32_t>(t->shape.size());
  t->dl.shape = t->shape.data();
  if (mode & 8) t->dl.ndim = static_cast<int32_t>(r.small(40)) - 4;  // may disagree with shape
  if (t->dl.ndim < 0 || t->dl.ndim > static_cast<int32_t>(t->shape.size())) {
    // Keep the harness in bounds: the library may only read ndim entries.
    if (t->dl.ndim > static_cast<int32_t>(t->shape.size()))
      t->shape.resize(static_cast<size_t>(t->dl.ndim), 1);
    t->dl.shape = t->shape.data();
  }
  if (mode & 16) {
    t->strides.assign(t->shape.size(), 1);
    for (auto& s : t->strides) s = r.small(9) - 1;
    t->dl.strides = t->strides.data();
  }
  static const int32_t kDevices[] = {kDLCPU, kDLCPU, kDLCUDAHost, kDLCUDAManaged, kDLCUDA, 99};
  t->dl.device = DLDevice{static_cast<DLDeviceType>(kDevices[r.small(6)]), 0};
  t->dl.byte_offset = (mode & 32) ? static_cast<uint64_t>(r.small(7)) : 0;
  if ((mode & 0xC0) == 0xC0) t->dl.byte_offset = ~uint64_t{0} - r.small(3);
  // Claimed extent with overflow checks in the harness itself.
  int64_t numel = 1;
  bool huge = false;
  for (int32_t i = 0; i < t->dl.ndim; ++i) {
    const int64_t d = t->shape[static_cast<size_t>(i)];
    if (d < 0) continue;  // invalid: the library must reject it
    if (d != 0 && numel > kMaxBacked / d) {
      huge = true;
      break;
    }
    numel *= d;
  }
  int64_t bytes = (numel * std::max<int64_t>(elem_bits(t->dl.dtype), 8) + 7) / 8;
  if (t->dl.byte_offset > static_cast<uint64_t>(kMaxBacked)) huge = true;
  if (!huge && bytes <= kMaxBacked && (mode & 0xC0) != 0x80) {
    t->extent = bytes + static_cast<int64_t>(t->dl.byte_offset);
    t->storage.reset(new uint8_t[static_cast<size_t>(std::max<int64_t>(t->extent, 1))]);
    for (int64_t i = 0; i < t->extent; ++i) t->storage[static_cast<size_t>(i)] = r.u8();
    t->dl.data = t->storage.get();
    t->backed = true;
  } else {
    t->dl.data = nullptr;  // claims more than we back: must be rejected
  }
  return t;
}

void check_unchanged(const std::vector<FuzzTensor*>& inputs) {
  for (const FuzzTensor* t : inputs) {
    if (!t->unchanged()) std::abort();  // an input was modified
  }
}

Q4_op_options pick_options(Reader& r) {
  Q4_op_options o{};
  Q4_op_options_init(&o);
  const uint8_t b = r.u8();
  o.compute_path = b & 3;
  o.backend = (b >> 2) & 3;
  o.math_mode = (b >> 4) & 1;
  o.num_threads = (b >> 5) & 3;
  // A struct_size larger than the struct would claim bytes this stack object
  // does not have (the caller's promise): only sizes up to its own.
  if (r.u8() == 0xff) o.struct_size = std::min<uint32_t>(r.u8(), sizeof o);
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const int64_t rows = 1 + r.small(5), k = 16 * (1 + r.small(4)), n = 1 + r.small(5);
  const DLDataType f32{kDLFloat, 32, 1}, u8{kDLUInt, 8, 1};
  // Ops 0-15 from the op byte's low bits; its top 16 values pick the
  // MXFP4 entry points (16-20), added later: the older corpus keeps its
  // meaning but for the inputs whose op byte is one of those.
  const uint8_t op_byte = r.u8();
  const int op = op_byte >= 240 ? 16 + (op_byte - 240) % 5 : op_byte % 16;
  Q4_op_options opts = pick_options(r);
  const Q4_op_options* o = (r.u8() & 7) == 0 ? nullptr : &opts;
  const int32_t layout = static_cast<int32_t>(r.small(3));
  const float scalar = (r.u8() & 1) ? r.f32() : 0.5f;
  auto x = make_tensor(r, {rows, k}, f32);
  auto a = make_tensor(r, {rows, k / 2}, u8);
  auto b = make_tensor(r, {rows, k / 16}, u8);
  auto c = make_tensor(r, {n, k / 2}, u8);
  auto d = make_tensor(r, {n, k / 16}, u8);
  auto out = make_tensor(r, {rows, n}, f32);
  for (FuzzTensor* t : {x.get(), a.get(), b.get(), c.get(), d.get(), out.get()}) t->snapshot();
  float g_out = 0;
  switch (op) {
    case 0:
      NVFP4_quantize(&x->dl, &a->dl, &b->dl, layout, scalar, &g_out, o);
      check_unchanged({x.get()});
      break;
    case 1:
      NVFP4_dequantize(&a->dl, &b->dl, layout, scalar, &x->dl, o);
      check_unchanged({a.get(), b.get()});
      break;
    case 2:
      NVFP4_scaled_mm(&a->dl, &b->dl, &c->dl, &d->dl, layout, scalar, (r.u8() & 1) ? &x->dl : nullptr,
                      &out->dl, o);
      check_unchanged({a.get(), b.get(), c.get(), d.get(), x.get()});
      break;
    case 3:
      NVFP4_linear(&x->dl, &c->dl, &d->dl, layout, scalar, nullptr, &out->dl, o);
      check_unchanged({x.get(), c.get(), d.get()});
      break;
    case 4:
      NF4_quantize(&x->dl, &a->dl, &b->dl, static_cast<int32_t>(32 << r.small(8)), o);
      check_unchanged({x.get()});
      break;
    case 5:
    case 6: {
      NF4_state st{};
      st.struct_size = (r.u8() & 15) ? sizeof st : std::min<uint32_t>(r.u8(), sizeof st);
      st.blocksize = static_cast<int32_t>(32 << r.small(8));
      st.absmax = (r.u8() & 7) ? &b->dl : nullptr;
      if (r.u8() & 1) {
        st.nested_absmax = &d->dl;
        st.nested_quant_map = (r.u8() & 3) ? &c->dl : nullptr;
        st.nested_offset = scalar;
      }
      if (r.u8() & 1) st.quant_map = &c->dl;
      if (op == 5) {
        NF4_dequantize(&a->dl, &st, &x->dl, o);
      } else {
        NF4_scaled_mm(&x->dl, &a->dl, &st, nullptr, &out->dl, o);
      }
      check_unchanged({a.get(), b.get(), c.get(), d.get()});
      if (op == 6) check_unchanged({x.get()});
      break;
    }
    case 7:
      NVFP4_swizzle_scales(&b->dl, &a->dl);
      check_unchanged({b.get()});
      break;
    case 8:
      NVFP4_unswizzle_scales(&a->dl, &b->dl);
      check_unchanged({a.get()});
      break;
    case 9: {
      float offset = 0;
      NF4_double_quantize(&x->dl, &a->dl, &b->dl, &out->dl, &offset, o);
      check_unchanged({x.get()});
      break;
    }
    case 10:
      NVFP4_fake_quantize(&x->dl, &out->dl, scalar, &g_out, o);
      check_unchanged({x.get()});
      break;
    case 11:
      NVFP4_linear_backward(&out->dl, &x->dl, &c->dl, &d->dl, layout, scalar, (r.u8() & 1) ? &a->dl : nullptr,
                            (r.u8() & 1) ? &b->dl : nullptr, o);
      check_unchanged({out.get(), x.get(), c.get(), d.get()});
      break;
    case 16:
    case 17:
    case 18:
    case 19:
    case 20: {
      // MXFP4: E8M0 scales per 32 elements (k / 32 columns; k may be 16
      // or 48, which the library must refuse).
      auto as = make_tensor(r, {rows, std::max<int64_t>(1, k / 32)}, u8);
      auto ws = make_tensor(r, {n, std::max<int64_t>(1, k / 32)}, u8);
      as->snapshot();
      ws->snapshot();
      if (op == 16) {
        MXFP4_quantize(&x->dl, &a->dl, &as->dl, layout, o);
        check_unchanged({x.get()});
      } else if (op == 17) {
        MXFP4_dequantize(&a->dl, &as->dl, layout, &x->dl, o);
        check_unchanged({a.get(), as.get()});
      } else if (op == 18) {
        MXFP4_linear(&x->dl, &c->dl, &ws->dl, layout, nullptr, &out->dl, o);
        check_unchanged({x.get(), c.get(), ws.get()});
      } else if (op == 19) {
        MXFP4_scaled_mm(&a->dl, &as->dl, &c->dl, &ws->dl, layout, scalar, (r.u8() & 1) ? &b->dl : nullptr,
                        &out->dl, o);
        check_unchanged({a.get(), as.get(), c.get(), ws.get(), b.get()});
      } else {
        // Expert groups: counts, experts and row counts from the input,
        // the arrays sometimes NULL (n_groups -1 .. 3).
        const int64_t n_groups = r.small(5) - 1;
        int32_t expert_of_group[3] = {};
        int64_t group_rows[3] = {};
        for (int g = 0; g < 3; ++g) {
          expert_of_group[g] = static_cast<int32_t>(r.small(4)) - 1;
          group_rows[g] = r.small(rows + 2) - 1;
        }
        const bool arrays = (r.u8() & 7) != 0;
        // (n_groups > 3 would make the library read past these arrays,
        // the caller's promise: at most 3.)
        MXFP4_linear_experts(&x->dl, &c->dl, &ws->dl, layout, arrays ? expert_of_group : nullptr,
                             arrays ? group_rows : nullptr, std::min<int64_t>(n_groups, 3),
                             (r.u8() & 1) ? &d->dl : nullptr, &out->dl, o);
        check_unchanged({x.get(), c.get(), ws.get(), d.get()});
      }
      break;
    }
    default: {
      // Sessions, linears, mutable tensors.
      Q4_session_config cfg{};
      Q4_session_config_init(&cfg);
      cfg.compute_path = r.small(4);
      cfg.backend = r.small(5);
      cfg.math_mode = r.small(2);
      Q4_session* s = nullptr;
      if (Q4_session_create((r.u8() & 3) ? &cfg : nullptr, &s) != Q4_OK) break;
      Q4_weight_bundle wb{};
      Q4_weight_bundle_init(&wb);
      wb.format = static_cast<int32_t>(r.small(4));
      wb.source = static_cast<int32_t>(r.small(3));
      wb.weight = (wb.source == Q4_WEIGHT_FLOAT) ? &x->dl : &c->dl;
      wb.scale = &d->dl;
      wb.scale_layout = layout;
      wb.out_features = n;
      wb.in_features = k + r.small(3) - 1;
      wb.global_scale = scalar;
      Q4_linear* l = nullptr;
      if (Q4_linear_create(s, &wb, &l) == Q4_OK) {
        Q4_linear_forward(l, &x->dl, &out->dl);
        Q4_linear_update_weight(l, &wb);
        char buf[64];
        size_t needed = 0;
        Q4_linear_diagnostics(l, (r.u8() & 1) ? buf : nullptr, sizeof buf, &needed);
        Q4_linear_destroy(l);
      }
      check_unchanged({c.get(), d.get()});
      Q4_mutable* m = nullptr;
      // Only shapes the harness could back (a huge but valid tensor is legal).
      if (x->backed && Q4_mutable_create(s, x->dl.ndim, x->dl.shape, x->dl.dtype, &m) == Q4_OK) {
        DLTensor view{};
        if (Q4_mutable_begin_write(m, static_cast<int32_t>(r.small(3)), &view) == Q4_OK) {
          (r.u8() & 1) ? Q4_mutable_commit(m, nullptr) : Q4_mutable_abort(m);
        }
        DLManagedTensorVersioned* snap = nullptr;
        uint64_t v = 0;
        if (Q4_mutable_acquire(m, &snap, &v) == Q4_OK) snap->deleter(snap);
        Q4_mutable_destroy(m);
      }
      if (Q4_session_destroy(s) != Q4_OK) std::abort();  // everything was released
      break;
    }
  }
  (void)r.done();
  return 0;
}
