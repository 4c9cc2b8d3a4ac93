// The CPU implementation of every validated operation (see op_desc.h).
#pragma once

#include "core/op_desc.h"

namespace q4::core::cpu {

void run(const Nvfp4QuantizeDesc& d);
void run(const Nvfp4DequantizeDesc& d);
void run(const Nf4QuantizeDesc& d);
void run(const Nf4DequantizeDesc& d);
void run(const ProductDesc& d);

}  // namespace q4::core::cpu
