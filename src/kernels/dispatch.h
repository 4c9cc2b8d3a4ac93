// ISA selection for the kernel tables: what is compiled in, what the CPU
// runs, what the cap allows.
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace q4 {

// Levels compiled into this library.
bool isa_compiled(int32_t isa);
// Best level compiled in that this CPU runs.
int32_t best_isa();
// The level the kernels use now: best level allowed by the cap.
int32_t active_isa();

namespace kern {
// The table of a level compiled in (the scalar table for any other value);
// the caller checks that the CPU runs it.
const KernelTable& table_for(int32_t isa);
// avx512_vnni_table_decode(vbmi) into *out when the AVX-512 VNNI table is
// compiled in (true), else false (tests; the caller checks that the CPU
// runs it, and has VBMI for vbmi = true).
bool avx512_vnni_decode_variant(bool vbmi, KernelTable* out);
// avx512_table_dequant16(cvtne) into *out when the AVX-512 table is
// compiled in (true), else false (tests; the caller checks that the CPU
// runs it, and has AVX512_BF16 for cvtne = true).
bool avx512_dequant16_variant(bool cvtne, KernelTable* out);
// avx512_table_quantize_far() into *out when the AVX-512 table is compiled
// in (true), else false (tests; the caller checks that the CPU runs it).
bool avx512_quantize_far_variant(KernelTable* out);
// avx512_table_chunk_k64(max_m) into *out when the AVX-512 table is
// compiled in (true), else false (tests; the caller checks that the CPU
// runs it).
bool avx512_chunk_k64_variant(int32_t max_m, KernelTable* out);
// The table for the active ISA; records it as this thread's last ISA used.
// (active_table() in kernel_table.h is the same function.)
int32_t last_isa_used();
// Records the level whose kernels this thread's operation actually ran
// (fast mode: the integer table, or its exact level when it fell back).
void note_isa_used(int32_t isa);
}  // namespace kern

}  // namespace q4
