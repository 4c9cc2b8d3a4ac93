#include "common/enum_tables.h"

namespace q4::names {
namespace {

struct EnumName {
  int32_t value;
  const char* name;
};

template <size_t N>
const char* lookup(const EnumName (&table)[N], int32_t value, const char* fallback) {
  for (const EnumName& e : table) {
    if (e.value == value) return e.name;
  }
  return fallback;
}

constexpr DtypeInfo kDtypes[] = {
    {Q4_DTYPE_F32, "F32", 32, {kDLFloat, 32, 1}},
    {Q4_DTYPE_F16, "F16", 16, {kDLFloat, 16, 1}},
    {Q4_DTYPE_BF16, "BF16", 16, {kDLBfloat, 16, 1}},
    {Q4_DTYPE_U8, "U8", 8, {kDLUInt, 8, 1}},
    {Q4_DTYPE_I8, "I8", 8, {kDLInt, 8, 1}},
    {Q4_DTYPE_F8_E4M3, "F8_E4M3", 8, {kDLFloat8_e4m3fn, 8, 1}},
    {Q4_DTYPE_F4, "F4", 4, {kDLFloat4_e2m1fn, 4, 1}},
    {Q4_DTYPE_I16, "I16", 16, {kDLInt, 16, 1}},
    {Q4_DTYPE_I32, "I32", 32, {kDLInt, 32, 1}},
    {Q4_DTYPE_I64, "I64", 64, {kDLInt, 64, 1}},
    {Q4_DTYPE_F64, "F64", 64, {kDLFloat, 64, 1}},
    {Q4_DTYPE_BOOL, "BOOL", 8, {kDLBool, 8, 1}},
    {Q4_DTYPE_F8_E5M2, "F8_E5M2", 8, {kDLFloat8_e5m2, 8, 1}},
    {Q4_DTYPE_U16, "U16", 16, {kDLUInt, 16, 1}},
    {Q4_DTYPE_U32, "U32", 32, {kDLUInt, 32, 1}},
    {Q4_DTYPE_U64, "U64", 64, {kDLUInt, 64, 1}},
};

constexpr EnumName kPaths[] = {{Q4_PATH_AUTO, "Auto"},
                               {Q4_PATH_KERNEL_ONLY, "KernelOnly"},
                               {Q4_PATH_KERNEL_OR_FALLBACK, "KernelOrFallback"},
                               {Q4_PATH_DEQUANT_MATMUL_ONLY, "DequantMatmulOnly"}};
constexpr EnumName kBackends[] = {{Q4_BACKEND_AUTO, "auto"},
                                  {Q4_BACKEND_NVFP4_KERNEL, "nvfp4-kernel"},
                                  {Q4_BACKEND_NF4_KERNEL, "nf4-kernel"},
                                  {Q4_BACKEND_DEQUANT_MATMUL, "dequant-matmul"}};
constexpr EnumName kPolicies[] = {
    {Q4_UM_DISABLED, "Disabled"}, {Q4_UM_PREFER, "PreferUnified"}, {Q4_UM_REQUIRE, "RequireUnified"}};
constexpr EnumName kFamilies[] = {{Q4_SCHEMA_NONE, "none"},
                                  {Q4_SCHEMA_BNB_NF4, "bitsandbytes-nf4"},
                                  {Q4_SCHEMA_NVFP4_LEGACY, "nvfp4-legacy"},
                                  {Q4_SCHEMA_NVFP4_MODELOPT, "nvfp4-modelopt"},
                                  {Q4_SCHEMA_NVFP4_COMPRESSED, "nvfp4-compressed-tensors"},
                                  {Q4_SCHEMA_MXFP4_GPT_OSS, "mxfp4-gpt-oss"}};
constexpr EnumName kFormats[] = {{Q4_FORMAT_NONE, "none"},
                                 {Q4_FORMAT_NVFP4, "nvfp4"},
                                 {Q4_FORMAT_NF4, "nf4"},
                                 {Q4_FORMAT_MIXED, "mixed"},
                                 {Q4_FORMAT_MXFP4, "mxfp4"}};
constexpr EnumName kTargets[] = {{Q4_TARGET_AUTO, "auto"}, {Q4_TARGET_CPU, "cpu"}, {Q4_TARGET_CUDA, "cuda"}};
constexpr EnumName kMath[] = {{Q4_MATH_EXACT, "exact"}, {Q4_MATH_FAST, "fast"}};

}  // namespace

const DtypeInfo* dtype_info(int32_t dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.dtype == dtype) return &d;
  }
  return nullptr;
}

const DtypeInfo* dtype_by_name(std::string_view name) {
  for (const DtypeInfo& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const char* dtype_name(int32_t dtype) {
  const DtypeInfo* d = dtype_info(dtype);
  return d != nullptr ? d->name : "unknown";
}

const char* path_name(int32_t path) {
  return lookup(kPaths, path, "unknown");
}
const char* backend_name(int32_t backend) {
  return lookup(kBackends, backend, "unknown");
}
const char* um_name(int32_t policy) {
  return lookup(kPolicies, policy, "unknown");
}
const char* family_name(int32_t family) {
  return lookup(kFamilies, family, "unknown");
}
const char* format_name(int32_t format) {
  return lookup(kFormats, format, "unknown");
}
const char* target_name(int32_t target) {
  return lookup(kTargets, target, "unknown");
}
const char* math_name(int32_t math_mode) {
  return lookup(kMath, math_mode, "unknown");
}

}  // namespace q4::names
