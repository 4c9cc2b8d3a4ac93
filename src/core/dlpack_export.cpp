#include "core/dlpack_export.h"

#include <memory>
#include <string>

#include "common/error.h"

namespace q4::core {
namespace {

struct LegacyCtx {
  DLManagedTensor legacy{};
  DLManagedTensorVersioned* owner = nullptr;
};

void release_legacy(DLManagedTensor* self) {
  if (self == nullptr) return;
  auto* ctx = static_cast<LegacyCtx*>(self->manager_ctx);
  if (ctx->owner != nullptr && ctx->owner->deleter != nullptr) ctx->owner->deleter(ctx->owner);
  delete ctx;
}

}  // namespace

DLManagedTensor* to_unversioned(DLManagedTensorVersioned* tensor) {
  if (tensor == nullptr) fail(Q4_ERR_NULL_POINTER, "tensor", "pointer is NULL");
  if (tensor->version.major != 1) {
    fail(Q4_ERR_UNSUPPORTED, "tensor",
         "DLPack major version " + std::to_string(tensor->version.major) + " (expected 1)");
  }
  auto ctx = std::make_unique<LegacyCtx>();
  ctx->legacy.dl_tensor = tensor->dl_tensor;  // shape/strides stay owned by `tensor`
  ctx->legacy.manager_ctx = ctx.get();
  ctx->legacy.deleter = release_legacy;
  ctx->owner = tensor;
  return &ctx.release()->legacy;
}

}  // namespace q4::core
