// libFuzzer harness for the bitsandbytes quant_state JSON: the input bytes
// become the `P.weight.quant_state.bitsandbytes__nf4` tensor of an otherwise
// valid NF4 checkpoint (written with the library's writer to /tmp), which
// Q4_checkpoint_linear_create then decodes (shape, blocksize, nested fields).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "nvfp4/nvfp4.h"

namespace {

DLTensor host(const void* data, int64_t* shape, int32_t ndim, DLDataType dt) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}

// A file path removed (if it exists) when the object is destroyed.
struct TempFile {
  explicit TempFile(std::string p) : path(std::move(p)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Q4_session* session = [] {
    Q4_session* s = nullptr;
    Q4_session_create(nullptr, &s);
    return s;
  }();
  const DLDataType u8{kDLUInt, 8, 1}, f32{kDLFloat, 32, 1};
  std::vector<uint8_t> q(64, 0x37);
  std::vector<float> absmax(2, 1.0f), qmap(16, 0.5f), nested(1, 1.0f), nmap(256, 0.25f);
  std::vector<uint8_t> qabs(2, 3);
  int64_t qs[2] = {64, 1}, as[1] = {2}, ms[1] = {16}, ns[1] = {1}, nms[1] = {256},
          js[1] = {static_cast<int64_t>(size)};
  const bool nested_form = size > 0 && (data[0] & 1);
  Q4_checkpoint_writer* w = nullptr;
  if (Q4_checkpoint_writer_create(&w) != Q4_OK) return 0;
  DLTensor tq = host(q.data(), qs, 2, u8), tm = host(qmap.data(), ms, 1, f32);
  DLTensor ta = nested_form ? host(qabs.data(), as, 1, u8) : host(absmax.data(), as, 1, f32);
  DLTensor tj = host(size ? data : reinterpret_cast<const uint8_t*>(""), js, 1, u8);
  Q4_checkpoint_writer_add(w, "p.weight", Q4_DTYPE_U8, &tq);
  Q4_checkpoint_writer_add(w, "p.weight.absmax", nested_form ? Q4_DTYPE_U8 : Q4_DTYPE_F32, &ta);
  Q4_checkpoint_writer_add(w, "p.weight.quant_map", Q4_DTYPE_F32, &tm);
  if (nested_form) {
    DLTensor tn = host(nested.data(), ns, 1, f32), tnm = host(nmap.data(), nms, 1, f32);
    Q4_checkpoint_writer_add(w, "p.weight.nested_absmax", Q4_DTYPE_F32, &tn);
    Q4_checkpoint_writer_add(w, "p.weight.nested_quant_map", Q4_DTYPE_F32, &tnm);
  }
  Q4_checkpoint_writer_add(w, "p.weight.quant_state.bitsandbytes__nf4", Q4_DTYPE_U8, &tj);
  // The atomic writer needs a real directory for its temporary file; the
  // checkpoint is removed when the process exits.
  static const TempFile file("/tmp/nvfp4-fuzz-quant-state-" + std::to_string(getpid()) + ".safetensors");
  const std::string& path = file.path;
  const bool written = Q4_checkpoint_writer_commit(w, path.c_str()) == Q4_OK;
  Q4_checkpoint_writer_destroy(w);
  if (!written) return 0;
  Q4_checkpoint* c = nullptr;
  if (Q4_checkpoint_open(path.c_str(), &c) == Q4_OK) {
    Q4_linear* l = nullptr;
    if (Q4_checkpoint_linear_create(session, c, "p", &l) == Q4_OK) {
      float x[1024] = {0}, y[1024];
      Q4_linear_info info{};
      info.struct_size = sizeof info;
      Q4_linear_info_get(l, &info);
      if (info.in_features <= 1024 && info.out_features <= 1024 && info.in_features > 0) {
        int64_t xs[2] = {1, info.in_features}, ys[2] = {1, info.out_features};
        DLTensor tx = host(x, xs, 2, f32), ty = host(y, ys, 2, f32);
        Q4_linear_forward(l, &tx, &ty);
      }
      Q4_linear_destroy(l);
    }
    Q4_checkpoint_close(c);
  }
  return 0;
}
