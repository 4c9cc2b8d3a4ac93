// libFuzzer harness for the safetensors reader: the input bytes are a whole
// file (served from an anonymous memfd, no disk). Every malformed input must
// give a status; a valid one is walked (views, metadata, schema detection).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nvfp4/nvfp4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("nvfp4-fuzz", 0);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    const ssize_t w = write(fd, data + off, size - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  Q4_checkpoint* c = nullptr;
  if (Q4_checkpoint_open(path.c_str(), &c) == Q4_OK) {
    size_t n = 0;
    Q4_checkpoint_count(c, &n);
    for (size_t i = 0; i < n; ++i) {
      Q4_tensor_desc d{};
      int64_t bytes = 0;
      if (Q4_checkpoint_tensor_info(c, i, &d, &bytes) != Q4_OK) std::abort();
      DLTensor v{};
      if (Q4_checkpoint_tensor(c, i, &v) != Q4_OK) std::abort();
      // Touch the first and last byte of every view: ASan checks the extent.
      if (bytes > 0) {
        volatile uint8_t first = static_cast<const uint8_t*>(v.data)[0];
        volatile uint8_t last = static_cast<const uint8_t*>(v.data)[bytes - 1];
        (void)first;
        (void)last;
      }
    }
    Q4_schema_summary s{};
    s.struct_size = sizeof s;
    Q4_checkpoint_detect(c, &s);
    char buf[32];
    size_t needed = 0;
    Q4_checkpoint_metadata(c, "format", buf, sizeof buf, &needed);
    Q4_checkpoint_close(c);
  }
  close(fd);
  return 0;
}
