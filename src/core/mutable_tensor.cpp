#include "core/mutable_tensor.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "core/product.h"

namespace q4::core {
namespace {

struct Version {
  std::unique_ptr<Buffer> mem;
  uint64_t version = 0;
};

struct SnapshotCtx {
  DLManagedTensorVersioned managed{};
  std::shared_ptr<const Version> version;
  std::vector<int64_t> shape;
  std::shared_ptr<SessionCounters> counters;
};

void release_snapshot(DLManagedTensorVersioned* self) {
  if (self == nullptr) return;
  auto* ctx = static_cast<SnapshotCtx*>(self->manager_ctx);
  std::shared_ptr<SessionCounters> c = ctx->counters;
  delete ctx;
  c->snapshots.fetch_sub(1);
}

}  // namespace
}  // namespace q4::core

struct Q4_mutable {
  std::shared_ptr<q4::core::SessionCounters> counters;
  std::vector<int64_t> shape;
  DLDataType dtype{};
  int64_t nbytes = 0;
  // Session policy: managed memory (CPU writers and GPU readers share it
  // in place) or host memory.
  q4::core::Memory memory = q4::core::Memory::Host;
  int32_t device = 0;
  int32_t threads = 0;  // the session's: a large Q4_WRITE_KEEP copy runs over them
  mutable std::mutex mutex;
  std::shared_ptr<q4::core::Version> current;
  std::shared_ptr<q4::core::Version> writing;               // active writer's buffer
  std::vector<std::shared_ptr<q4::core::Version>> retired;  // may still be read
  std::shared_ptr<q4::core::Version> spare;                 // free for the next writer

  // Moves retired versions no reader holds to `spare` (one kept, rest freed).
  void sweep() {
    for (auto it = retired.begin(); it != retired.end();) {
      if (it->use_count() == 1) {
        if (!spare) spare = std::move(*it);
        it = retired.erase(it);
      } else {
        ++it;
      }
    }
  }
};

namespace q4::core {
namespace {

// Managed memory is reported as such, with its device: a CUDA consumer
// (Q4_linear_forward of a CUDA session) reads it in place.
DLDevice device_of(const Q4_mutable& m) {
  return m.memory == Memory::Managed ? DLDevice{kDLCUDAManaged, m.device} : DLDevice{kDLCPU, 0};
}

}  // namespace

Q4_mutable* create_mutable(Q4_session* s, int32_t ndim, const int64_t* shape, DLDataType dtype) {
  if (s == nullptr) fail(Q4_ERR_NULL_POINTER, "session", "pointer is NULL");
  if (ndim < 0 || ndim > 16) fail(Q4_ERR_SHAPE, "ndim", "expected 0..16, got " + std::to_string(ndim));
  if (ndim > 0 && shape == nullptr) fail(Q4_ERR_NULL_POINTER, "shape", "pointer is NULL");
  int64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0) fail(Q4_ERR_SHAPE, "shape", "dimension " + std::to_string(i) + " is negative");
    numel = checked_mul(numel, shape[i], "shape");
  }
  if (dtype.lanes != 1 || dtype.bits == 0 || dtype.bits % 8 != 0 || dtype.bits > 64) {
    fail(Q4_ERR_DTYPE, "dtype", "expected a whole-byte scalar dtype, got " + dtype_text(dtype));
  }
  const int64_t nbytes = checked_mul(numel, dtype.bits / 8, "shape");
  if (nbytes > (int64_t{1} << 40)) fail(Q4_ERR_OVERFLOW, "shape", "tensor too large");
  auto m = std::make_unique<Q4_mutable>();
  m->counters = s->counters;
  m->shape.assign(shape, shape + ndim);
  m->dtype = dtype;
  m->nbytes = nbytes;
  m->memory = s->settings.managed ? Memory::Managed : Memory::Host;
  m->device = s->settings.device;
  m->threads = s->settings.ops.num_threads;
  m->current = std::make_shared<Version>();
  m->current->mem = std::make_unique<Buffer>(s->counters, nbytes, m->memory, m->device);
  std::memset(m->current->mem->data(), 0, static_cast<size_t>(nbytes));
  s->counters->mutables.fetch_add(1);
  return m.release();
}

void destroy_mutable(Q4_mutable* m) {
  {
    std::lock_guard<std::mutex> lock(m->mutex);
    if (m->writing) fail(Q4_ERR_STATE, "tensor", "a writer is active; commit or abort it first");
  }
  std::shared_ptr<SessionCounters> c = m->counters;
  delete m;  // versions still held by snapshots stay alive until released
  c->mutables.fetch_sub(1);
}

void begin_write(Q4_mutable* m, int32_t mode, DLTensor* view) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  if (view == nullptr) fail(Q4_ERR_NULL_POINTER, "view", "pointer is NULL");
  if (mode != Q4_WRITE_KEEP && mode != Q4_WRITE_DISCARD) {
    fail(Q4_ERR_INVALID_ARGUMENT, "mode",
         "expected Q4_WRITE_KEEP or Q4_WRITE_DISCARD, got " + std::to_string(mode));
  }
  std::shared_ptr<Version> buf, base;
  bool reused = false;
  {
    std::lock_guard<std::mutex> lock(m->mutex);
    if (m->writing) fail(Q4_ERR_BUSY, "tensor", "another writer is active");
    m->sweep();
    if (m->spare) {
      buf = std::move(m->spare);
      reused = true;
    } else {
      buf = std::make_shared<Version>();
      buf->mem = std::make_unique<Buffer>(m->counters, m->nbytes, m->memory, m->device);
    }
    m->writing = buf;
    base = m->current;
  }
  // The committed version is immutable, so the copy needs no lock. A large
  // one runs over the session's threads (copy_bytes), into a spare version
  // of 16 MiB or more by non-temporal stores: on a Zen 4 VM with a 32 MiB
  // L3 (docs/performance.md, sixty-third session) they lost to ordinary
  // stores while the two versions fit in the L3 (4 MiB: 0.17 against
  // 0.12 ms, 8 MiB: 0.30 against 0.15) and won once they did not (16 MiB
  // written in turn with another: 0.70 against 0.9-1.5 ms; 32 MiB alone:
  // 1.45 against 1.9-2.9; a single-threaded memcpy had taken 1.45 and 2.9).
  // (If the copy fails, e.g. no memory for the pool's job, the write is
  // given up as Q4_mutable_abort would, so that the tensor stays writable.)
  constexpr int64_t kStreamMin = int64_t{16} << 20;
  if (mode == Q4_WRITE_KEEP) {
    try {
      copy_bytes(buf->mem->data(), base->mem->data(), m->nbytes, m->threads,
                 reused && m->nbytes >= kStreamMin);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m->mutex);
      if (!m->spare) m->spare = std::move(m->writing);
      m->writing.reset();
      throw;
    }
  }
  DLTensor t{};
  t.data = buf->mem->data();
  t.device = device_of(*m);
  t.ndim = static_cast<int32_t>(m->shape.size());
  t.dtype = m->dtype;
  t.shape = m->shape.data();
  *view = t;
}

uint64_t commit(Q4_mutable* m) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  std::lock_guard<std::mutex> lock(m->mutex);
  if (!m->writing) fail(Q4_ERR_STATE, "tensor", "no write in progress");
  m->writing->version = m->current->version + 1;
  m->retired.push_back(std::move(m->current));
  m->current = std::move(m->writing);
  m->sweep();
  return m->current->version;
}

void abort_write(Q4_mutable* m) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  std::lock_guard<std::mutex> lock(m->mutex);
  if (!m->writing) fail(Q4_ERR_STATE, "tensor", "no write in progress");
  if (!m->spare) m->spare = std::move(m->writing);
  m->writing.reset();
}

DLManagedTensorVersioned* acquire(Q4_mutable* m, uint64_t* version) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  auto ctx = std::make_unique<SnapshotCtx>();
  {
    std::lock_guard<std::mutex> lock(m->mutex);
    ctx->version = m->current;
  }
  ctx->shape = m->shape;
  ctx->counters = m->counters;
  DLManagedTensorVersioned& mt = ctx->managed;
  mt.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  mt.manager_ctx = ctx.get();
  mt.deleter = release_snapshot;
  mt.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  mt.dl_tensor.data = const_cast<uint8_t*>(ctx->version->mem->data());
  mt.dl_tensor.device = device_of(*m);
  mt.dl_tensor.ndim = static_cast<int32_t>(ctx->shape.size());
  mt.dl_tensor.dtype = m->dtype;
  mt.dl_tensor.shape = ctx->shape.data();
  mt.dl_tensor.strides = nullptr;
  mt.dl_tensor.byte_offset = 0;
  if (version != nullptr) *version = ctx->version->version;
  m->counters->snapshots.fetch_add(1);
  return &ctx.release()->managed;
}

uint64_t version_of(const Q4_mutable* m) {
  if (m == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  std::lock_guard<std::mutex> lock(m->mutex);
  return m->current->version;
}
}  // namespace q4::core
