#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/enum_tables.h"
#include "common/error.h"
#include "io/replace_file.h"

namespace q4::io {
namespace {

constexpr int64_t kMaxHeader = int64_t{100} * 1000 * 1000;  // 100 MB, as the reference implementation

[[noreturn]] void bad(const std::string& what) {
  fail(Q4_ERR_FORMAT, "", "malformed safetensors: " + what);
}

// A header string must be valid UTF-8 (JSON's encoding; the writer's
// serializer checks it the same way at commit, which failed as an internal
// error there).
void require_utf8(const std::string& s, const char* arg) {
  try {
    (void)nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    fail(Q4_ERR_INVALID_ARGUMENT, arg, "is not valid UTF-8");
  }
}

}  // namespace

int64_t dtype_bits(int32_t dtype) {
  const names::DtypeInfo* d = names::dtype_info(dtype);
  return d != nullptr ? d->bits : 0;
}

int32_t dtype_from_string(const std::string& s) {
  const names::DtypeInfo* d = names::dtype_by_name(s);
  return d != nullptr ? d->dtype : Q4_DTYPE_UNKNOWN;
}

const char* dtype_to_string(int32_t dtype) {
  return names::dtype_name(dtype);
}

Parsed parse(const uint8_t* bytes, int64_t size) {
  if (size < 8) bad("file of " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | bytes[i];  // little endian
  if (hlen > static_cast<uint64_t>(kMaxHeader))
    bad("header length " + std::to_string(hlen) + " exceeds 100 MB");
  if (static_cast<int64_t>(hlen) > size - 8) {
    bad("header length " + std::to_string(hlen) + " runs past the end of the file (" + std::to_string(size) +
        " bytes)");
  }
  Parsed p;
  p.data_start = 8 + static_cast<int64_t>(hlen);
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + hlen);  // validates UTF-8
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("header is not valid UTF-8 JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad("header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad("__metadata__ value of '" + m.key() + "' is not a string");
        p.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad("entry '" + key + "' is not an object");
    TensorEntry t;
    t.name = key;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) bad("entry '" + key + "' has no dtype string");
    t.dtype = dtype_from_string(dt->get<std::string>());
    if (t.dtype == Q4_DTYPE_UNKNOWN)
      bad("entry '" + key + "' has unsupported dtype '" + dt->get<std::string>() + "'");
    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) bad("entry '" + key + "' has no shape array");
    if (sh->size() > 16) bad("entry '" + key + "' has more than 16 dimensions");
    int64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        bad("entry '" + key + "' has a shape dimension that is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 62)) bad("entry '" + key + "' has a dimension too large");
      int64_t r = 0;
      if (__builtin_mul_overflow(numel, static_cast<int64_t>(dim), &r) || r > (int64_t{1} << 62)) {
        bad("entry '" + key + "': element count overflows");
      }
      numel = r;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      bad("entry '" + key + "' has no data_offsets [begin, end] of non-negative integers");
    }
    const uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    if (b > e) bad("entry '" + key + "' has data_offsets begin > end");
    if (e > static_cast<uint64_t>(size - p.data_start))
      bad("entry '" + key + "' data runs past the end of the file");
    t.begin = static_cast<int64_t>(b);
    t.end = static_cast<int64_t>(e);
    const int64_t bits = dtype_bits(t.dtype);
    int64_t total_bits = 0;
    if (__builtin_mul_overflow(numel, bits, &total_bits)) bad("entry '" + key + "': byte size overflows");
    if (total_bits % 8 != 0)
      bad("entry '" + key + "': " + std::to_string(numel) + " 4-bit elements do not fill whole bytes");
    if (total_bits / 8 != t.end - t.begin) {
      bad("entry '" + key + "' holds " + std::to_string(t.end - t.begin) +
          " bytes, its dtype and shape need " + std::to_string(total_bits / 8));
    }
    p.tensors.push_back(std::move(t));
  }
  // The data section is covered exactly: no holes, no overlaps, no tail.
  std::sort(p.tensors.begin(), p.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t expect = 0;
  for (const TensorEntry& t : p.tensors) {
    if (t.begin != expect) {
      bad(t.begin < expect
              ? "tensor '" + t.name + "' overlaps the previous tensor"
              : "hole of " + std::to_string(t.begin - expect) + " bytes before tensor '" + t.name + "'");
    }
    expect = t.end;
  }
  if (expect != size - p.data_start) {
    bad("the data section has " + std::to_string(size - p.data_start) + " bytes, the tensors cover " +
        std::to_string(expect));
  }
  return p;
}

MappedFile::MappedFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer
  // (the call hung); it is then refused as not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(Q4_ERR_IO, "path", "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(Q4_ERR_IO, "path", "'" + path + "' is not a regular file");
  }
  size_ = static_cast<int64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(Q4_ERR_IO, "path", "cannot map '" + path + "': " + std::strerror(errno));
    }
    data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_));
}

void Writer::add(const std::string& name, int32_t dtype, std::vector<int64_t> shape, const void* data,
                 int64_t nbytes) {
  if (name.empty() || name == "__metadata__")
    fail(Q4_ERR_INVALID_ARGUMENT, "name", "invalid tensor name '" + name + "'");
  require_utf8(name, "name");
  if (names_.count(name) != 0) fail(Q4_ERR_INVALID_ARGUMENT, "name", "duplicate tensor name '" + name + "'");
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(Q4_ERR_SHAPE, "shape", "negative dimension in '" + name + "'");
    numel = checked_mul(numel, d, "shape");
  }
  const int64_t bits = dtype_bits(dtype);
  if (bits == 0) fail(Q4_ERR_DTYPE, "dtype", "unknown dtype for '" + name + "'");
  if (checked_mul(numel, bits, "shape") != checked_mul(nbytes, 8, "nbytes")) {
    fail(Q4_ERR_SHAPE, "nbytes",
         "'" + name + "': " + std::to_string(nbytes) + " bytes do not match dtype and shape");
  }
  Item it{name, dtype, std::move(shape), {}};
  if (nbytes > 0)
    it.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + nbytes);
  names_.insert(name);
  try {
    items_.push_back(std::move(it));
  } catch (...) {
    names_.erase(name);
    throw;
  }
}

void Writer::add_metadata(const std::string& key, const std::string& value) {
  require_utf8(key, "key");
  require_utf8(value, "value");
  metadata_[key] = value;
}

void Writer::write(const std::string& path) const {
  // The header object written member by member, metadata first, then the
  // tensors in data order (an ordered_json object looks a key up by a
  // linear search: 20,000 tensors took 0.5 s; a model's shard may hold
  // tens of thousands of experts' tensors).
  std::string text = "{";
  auto member = [&text](const std::string& key, const nlohmann::ordered_json& value) {
    if (text.size() > 1) text.push_back(',');
    text += nlohmann::json(key).dump();
    text.push_back(':');
    text += value.dump();
  };
  if (!metadata_.empty()) member("__metadata__", nlohmann::ordered_json(metadata_));
  // Wider elements first: with an 8-byte padded header every tensor then
  // starts aligned to its element size (the format forbids holes).
  std::vector<const Item*> order;
  for (const Item& i : items_) order.push_back(&i);
  std::stable_sort(order.begin(), order.end(),
                   [](const Item* a, const Item* b) { return dtype_bits(a->dtype) > dtype_bits(b->dtype); });
  int64_t offset = 0;
  for (const Item* ip : order) {
    const Item& i = *ip;
    const int64_t end = offset + static_cast<int64_t>(i.bytes.size());
    member(i.name,
           {{"dtype", dtype_to_string(i.dtype)}, {"shape", i.shape}, {"data_offsets", {offset, end}}});
    offset = end;
  }
  text.push_back('}');
  if (static_cast<int64_t>(text.size()) > kMaxHeader) {
    fail(Q4_ERR_INVALID_ARGUMENT, "writer",
         "header of " + std::to_string(text.size()) + " bytes exceeds the 100 MB safetensors readers accept");
  }
  while (text.size() % 8 != 0) text.push_back(' ');  // data section 8-byte aligned
  uint8_t len[8];
  const uint64_t h = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(h >> (8 * i));
  std::vector<ByteRange> pieces{{len, 8}, {text.data(), text.size()}};
  for (const Item* i : order) pieces.push_back({i->bytes.data(), i->bytes.size()});
  const ReplaceError e = replace_file(path, pieces);
  if (e.err != 0) fail(Q4_ERR_IO, "path", e.where + ": " + std::strerror(e.err));
}

}  // namespace q4::io
