/* libNVFP4 — umbrella header.
 *
 * A C99/C++ clean, CUDA-free C ABI for 4-bit weight formats (NVFP4, NF4)
 * and the matrix products that use them. See docs/abi.md and docs/api.md.
 *
 *   #include <nvfp4/nvfp4.h>     link with -lNVFP4 (pkg-config nvfp4,
 *                                CMake find_package(NVFP4) -> NVFP4::NVFP4)
 */
#ifndef NVFP4_NVFP4_H_
#define NVFP4_NVFP4_H_

#include "nvfp4/checkpoint.h"
#include "nvfp4/cuda.h"
#include "nvfp4/dlpack.h"
#include "nvfp4/ops.h"
#include "nvfp4/q4_base.h"
#include "nvfp4/schema.h"
#include "nvfp4/session.h"
#include "nvfp4/training.h"
#include "nvfp4/version.h"

#endif /* NVFP4_NVFP4_H_ */
