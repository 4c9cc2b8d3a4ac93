// libFuzzer harness for schema detection over arbitrary key lists (with
// arbitrary dtypes, ndims and shapes). Names are built from fragments of the
// real schema suffixes so that the detector's deep paths are reached.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* kFragments[] = {".weight",
                                     ".absmax",
                                     ".quant_map",
                                     ".nested_absmax",
                                     ".nested_quant_map",
                                     ".quant_state",
                                     ".bitsandbytes__nf4",
                                     ".bitsandbytes__fp4",
                                     ".qdata",
                                     ".scale",
                                     "_scale",
                                     "_scale_2",
                                     "_packed",
                                     "_global_scale",
                                     ".input_scale",
                                     ".input_global_scale",
                                     ".bias",
                                     "layers.0",
                                     "layers.1",
                                     ".",
                                     "",
                                     "x"};
  constexpr size_t kNumFragments = sizeof kFragments / sizeof kFragments[0];
  std::vector<std::string> names;
  std::vector<Q4_tensor_desc> descs;
  size_t i = 0;
  auto next = [&]() -> uint8_t { return i < size ? data[i++] : 0; };
  const size_t count = next() % 24;
  for (size_t t = 0; t < count; ++t) {
    std::string name;
    const int parts = 1 + next() % 5;
    for (int p = 0; p < parts; ++p) {
      const uint8_t b = next();
      if (b >= 0xf0) {
        name.push_back(static_cast<char>(next()));  // raw byte, may be 0
      } else {
        name += kFragments[b % kNumFragments];
      }
    }
    names.push_back(name);
    Q4_tensor_desc d{};
    d.dtype = static_cast<int32_t>(next() % 20) - 1;
    d.ndim = static_cast<int32_t>(next() % 12) - 2;
    for (int k = 0; k < Q4_MAX_NDIM; ++k) d.shape[k] = static_cast<int64_t>(next()) - 8;
    descs.push_back(d);
  }
  for (size_t t = 0; t < count; ++t) descs[t].name = (next() == 0xff) ? nullptr : names[t].c_str();
  Q4_schema_summary s{};
  s.struct_size = sizeof s;
  Q4_detect_schema(descs.data(), descs.size(), &s);
  if (s.num_linears < 0 || s.num_incomplete < 0) std::abort();
  size_t found = 0;
  std::vector<Q4_linear_schema> out(static_cast<size_t>(next() % 8));
  for (auto& l : out) l.struct_size = sizeof l;
  Q4_detect_linears(descs.data(), descs.size(), out.empty() ? nullptr : out.data(), out.size(), &found);
  for (size_t t = 0; t < out.size() && t < found; ++t) {
    const Q4_linear_schema& l = out[t];
    if (l.prefix_tensor < 0 || static_cast<size_t>(l.prefix_tensor) >= descs.size()) std::abort();
    for (int r = 0; r < Q4_ROLE_COUNT; ++r) {
      if (l.roles[r] >= static_cast<int32_t>(descs.size())) std::abort();
    }
    if (static_cast<size_t>(l.prefix_len) > names[static_cast<size_t>(l.prefix_tensor)].size()) std::abort();
  }
  return 0;
}
