// One table per public enum: value <-> name (and, for dtypes, bits and the
// DLPack type). Diagnostics, schema names, the safetensors reader and the
// checkpoint layer all read these; nothing else spells the names.
#pragma once

#include <cstdint>
#include <string_view>

#include "nvfp4/nvfp4.h"

namespace q4::names {

struct DtypeInfo {
  int32_t dtype;     // Q4_DTYPE_*
  const char* name;  // safetensors spelling ("F32", "F8_E4M3", ...)
  int64_t bits;      // element size
  DLDataType dl;     // the DLPack type of an element
};

// nullptr when unknown.
const DtypeInfo* dtype_info(int32_t dtype);
const DtypeInfo* dtype_by_name(std::string_view name);
const char* dtype_name(int32_t dtype);  // "unknown" when unknown

const char* path_name(int32_t path);        // Q4_PATH_*: "Auto", "KernelOnly", ...
const char* backend_name(int32_t backend);  // Q4_BACKEND_*: "auto", "nvfp4-kernel", ...
const char* um_name(int32_t policy);        // Q4_UM_*: "Disabled", "PreferUnified", ...
const char* family_name(int32_t family);    // Q4_SCHEMA_*: "none", "bitsandbytes-nf4", ...
const char* format_name(int32_t format);    // Q4_FORMAT_*: "none", "nvfp4", "nf4", "mixed", "mxfp4"
const char* target_name(int32_t target);    // Q4_TARGET_*: "auto", "cpu", "cuda"
const char* math_name(int32_t math_mode);   // Q4_MATH_*: "exact", "fast"

}  // namespace q4::names
