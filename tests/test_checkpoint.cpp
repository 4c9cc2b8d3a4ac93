// Safetensors reader/writer and layer loading (docs/formats.md, checkpoint families): every malformed
// header class is rejected with Q4_ERR_FORMAT and a specific message; the
// writer round-trips; linears load from each family with the right global
// scale convention.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

using t::Tensor;

namespace {

std::string temp_path(const std::string& stem) {
  return "/tmp/nvfp4-test-" + std::to_string(::getpid()) + "-" + stem + ".safetensors";
}

std::vector<uint8_t> image(const std::string& header, size_t data_bytes, bool fix_length = true,
                           uint64_t len = 0) {
  const uint64_t n = fix_length ? header.size() : len;
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(0x3c);
  return out;
}

int32_t open_bytes(const std::vector<uint8_t>& bytes, std::string* message) {
  const std::string path = temp_path("malformed");
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  Q4_checkpoint* c = nullptr;
  const int32_t st = Q4_checkpoint_open(path.c_str(), &c);
  *message = Q4_last_error();
  Q4_checkpoint_close(c);
  std::remove(path.c_str());
  return st;
}

}  // namespace

TEST_CASE("the safetensors reader rejects every malformed header class", "[checkpoint]") {
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* needle;
  };
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const Case cases[] = {
      {"shorter than 8 bytes", {1, 2, 3}, "shorter than the 8-byte"},
      {"header length past the end", image(ok, 8, false, 4096), "runs past the end"},
      {"header length over 100 MB", image(ok, 8, false, 200000000), "exceeds 100 MB"},
      {"not JSON", image("{\"a\":", 0), "not valid UTF-8 JSON"},
      {"invalid UTF-8", image("{\"\xff\xfe\":{}}", 0), "not valid UTF-8 JSON"},
      {"not an object", image("[1,2]", 0), "not a JSON object"},
      {"entry not an object", image(R"({"a":3})", 0), "is not an object"},
      {"unknown dtype", image(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})", 1),
       "unsupported dtype 'Q7'"},
      {"negative dimension", image(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1),
       "non-negative integer"},
      {"shape not integers", image(R"({"a":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})", 2),
       "non-negative integer"},
      {"missing offsets", image(R"({"a":{"dtype":"U8","shape":[2]}})", 2), "data_offsets"},
      {"begin > end", image(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}})", 2), "begin > end"},
      {"size mismatch", image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "need 12"},
      {"past the end", image(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", 8),
       "past the end"},
      {"hole", image(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4), "hole of 2 bytes"},
      {"overlap",
       image(
           R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
           4),
       "overlaps"},
      {"trailing bytes", image(ok, 12), "cover 8"},
      {"metadata not strings", image(R"({"__metadata__":{"k":1}})", 0), "is not a string"},
      {"odd F4 count", image(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2), "whole bytes"},
      {"element count overflow",
       image(R"({"a":{"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0), "overflow"},
  };
  for (const Case& c : cases) {
    std::string msg;
    INFO(c.what << ": " << msg);
    const int32_t st = open_bytes(c.bytes, &msg);
    INFO(msg);
    CHECK(st == Q4_ERR_FORMAT);
    CHECK(msg.find(c.needle) != std::string::npos);
  }
  std::string msg;
  CHECK(open_bytes(image(ok, 8), &msg) == Q4_OK);
  Q4_checkpoint* c = nullptr;
  CHECK(Q4_checkpoint_open("/nonexistent/file.safetensors", &c) == Q4_ERR_IO);
  CHECK(std::string(Q4_last_error()).find("/nonexistent/file.safetensors") != std::string::npos);
  CHECK(Q4_checkpoint_open(nullptr, &c) == Q4_ERR_NULL_POINTER);
}

TEST_CASE("writer round trip: dtypes, shapes, metadata, alignment", "[checkpoint]") {
  Tensor f = t::random_float({3, 5}, t::f32(), 1);
  Tensor h = t::random_float({7}, t::bf16(), 2);
  Tensor b({5}, t::u8());
  for (int i = 0; i < 5; ++i) b.data()[i] = static_cast<uint8_t>(i * 50);
  Q4_checkpoint_writer* w = nullptr;
  REQUIRE(Q4_checkpoint_writer_create(&w) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(w, "bytes", Q4_DTYPE_U8, b.t()) == Q4_OK);  // odd size, added first
  REQUIRE(Q4_checkpoint_writer_add(w, "half", Q4_DTYPE_BF16, h.t()) == Q4_OK);
  REQUIRE(Q4_checkpoint_writer_add(w, "float", Q4_DTYPE_F32, f.t()) == Q4_OK);
  CHECK(Q4_checkpoint_writer_add(w, "float", Q4_DTYPE_F32, f.t()) == Q4_ERR_INVALID_ARGUMENT);  // duplicate
  CHECK(Q4_checkpoint_writer_add(w, "bad", Q4_DTYPE_F16, f.t()) == Q4_ERR_DTYPE);  // size mismatch
  REQUIRE(Q4_checkpoint_writer_metadata(w, "format", "pt") == Q4_OK);
  const std::string path = temp_path("roundtrip");
  REQUIRE(Q4_checkpoint_writer_commit(w, path.c_str()) == Q4_OK);
  Q4_checkpoint_writer_destroy(w);
  CHECK(Q4_checkpoint_writer_commit(nullptr, path.c_str()) == Q4_ERR_NULL_POINTER);

  Q4_checkpoint* c = nullptr;
  REQUIRE(Q4_checkpoint_open(path.c_str(), &c) == Q4_OK);
  size_t n = 0;
  REQUIRE(Q4_checkpoint_count(c, &n) == Q4_OK);
  CHECK(n == 3);
  size_t idx = 0;
  REQUIRE(Q4_checkpoint_find(c, "float", &idx) == Q4_OK);
  DLTensor v{};
  REQUIRE(Q4_checkpoint_tensor(c, idx, &v) == Q4_OK);
  CHECK(v.ndim == 2);
  CHECK(v.shape[1] == 5);
  CHECK(reinterpret_cast<uintptr_t>(v.data) % 4 == 0);  // wider dtypes first keeps alignment
  CHECK(std::memcmp(v.data, f.data(), f.bytes) == 0);
  REQUIRE(Q4_checkpoint_find(c, "half", &idx) == Q4_OK);
  REQUIRE(Q4_checkpoint_tensor(c, idx, &v) == Q4_OK);
  CHECK(v.dtype.code == kDLBfloat);
  CHECK(std::memcmp(v.data, h.data(), h.bytes) == 0);
  CHECK(Q4_checkpoint_find(c, "missing", &idx) == Q4_ERR_NOT_FOUND);
  size_t needed = 0;
  char buf[16];
  REQUIRE(Q4_checkpoint_metadata(c, "format", buf, sizeof buf, &needed) == Q4_OK);
  CHECK(std::string(buf) == "pt");
  CHECK(Q4_checkpoint_metadata(c, "other", buf, sizeof buf, &needed) == Q4_ERR_NOT_FOUND);
  Q4_checkpoint_close(c);
  std::remove(path.c_str());
}

namespace {

// Commits a one-tensor checkpoint holding `value` to `path`.
int32_t commit_one(const std::string& path, float value) {
  Tensor f({4}, t::f32());
  for (int i = 0; i < 4; ++i) f.set(i, value);
  Q4_checkpoint_writer* w = nullptr;
  if (Q4_checkpoint_writer_create(&w) != Q4_OK) return -1;
  int32_t st = Q4_checkpoint_writer_add(w, "v", Q4_DTYPE_F32, f.t());
  if (st == Q4_OK) st = Q4_checkpoint_writer_commit(w, path.c_str());
  Q4_checkpoint_writer_destroy(w);
  return st;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode : 0;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int open_fds() {
  return static_cast<int>(entries("/proc/self/fd").size());
}

}  // namespace

TEST_CASE("the writer replaces its file as a careful tool would: umask, kept mode, no temporaries",
          "[checkpoint]") {
  char tmpl[] = "/tmp/nvfp4-writer-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const mode_t saved_umask = ::umask(077);
  const int fds = open_fds();

  // A new file gets 0666 less the umask, as open(2) would give it.
  CHECK(commit_one(dir + "/private.safetensors", 1.0f) == Q4_OK);
  CHECK((mode_of(dir + "/private.safetensors") & 0777) == 0600);
  ::umask(002);
  CHECK(commit_one(dir + "/shared.safetensors", 1.0f) == Q4_OK);
  CHECK((mode_of(dir + "/shared.safetensors") & 0777) == 0664);

  // Replacing a file keeps its permission bits, whatever the umask.
  ::umask(022);
  REQUIRE(::chmod((dir + "/private.safetensors").c_str(), 0640) == 0);
  CHECK(commit_one(dir + "/private.safetensors", 2.0f) == Q4_OK);
  CHECK((mode_of(dir + "/private.safetensors") & 0777) == 0640);

  // A reader that has the old file open keeps reading the old bytes: the new
  // file is a new inode renamed over the path, never the old one truncated.
  Q4_checkpoint* c = nullptr;
  REQUIRE(Q4_checkpoint_open((dir + "/private.safetensors").c_str(), &c) == Q4_OK);
  DLTensor v{};
  REQUIRE(Q4_checkpoint_tensor(c, 0, &v) == Q4_OK);
  CHECK(commit_one(dir + "/private.safetensors", 3.0f) == Q4_OK);
  CHECK(static_cast<const float*>(v.data)[3] == 2.0f);
  Q4_checkpoint_close(c);
  REQUIRE(Q4_checkpoint_open((dir + "/private.safetensors").c_str(), &c) == Q4_OK);
  REQUIRE(Q4_checkpoint_tensor(c, 0, &v) == Q4_OK);
  CHECK(static_cast<const float*>(v.data)[3] == 3.0f);
  Q4_checkpoint_close(c);

  // A symbolic link at the path is replaced by the file; its target stays.
  REQUIRE(::symlink("shared.safetensors", (dir + "/link.safetensors").c_str()) == 0);
  CHECK(commit_one(dir + "/link.safetensors", 4.0f) == Q4_OK);
  CHECK(S_ISREG(mode_of(dir + "/link.safetensors")));
  REQUIRE(Q4_checkpoint_open((dir + "/shared.safetensors").c_str(), &c) == Q4_OK);
  REQUIRE(Q4_checkpoint_tensor(c, 0, &v) == Q4_OK);
  CHECK(static_cast<const float*>(v.data)[0] == 1.0f);
  Q4_checkpoint_close(c);

  // Failures name the path, leave it as it was and no temporary behind.
  REQUIRE(::mkdir((dir + "/sub").c_str(), 0755) == 0);
  CHECK(commit_one(dir + "/sub", 1.0f) == Q4_ERR_IO);  // a directory
  CHECK(std::string(Q4_last_error()).find("path") != std::string::npos);
  CHECK(S_ISDIR(mode_of(dir + "/sub")));
  CHECK(commit_one(dir + "/missing/x.safetensors", 1.0f) == Q4_ERR_IO);
  CHECK(std::string(Q4_last_error()).find("temporary file") != std::string::npos);
  CHECK(entries(dir) ==
        std::vector<std::string>{"link.safetensors", "private.safetensors", "shared.safetensors", "sub"});
  CHECK(open_fds() == fds);  // every descriptor closed, on success and failure

  ::umask(saved_umask);
  for (const std::string& n : entries(dir)) ::remove((dir + "/" + n).c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("the writer's edge cases: no tensors, names that are not UTF-8, many tensors", "[checkpoint]") {
  // No tensors (with and without metadata): a file every reader opens (the
  // header was written as `null` before, which no reader, this one
  // included, accepts).
  for (const bool meta : {false, true}) {
    INFO("metadata " << meta);
    Q4_checkpoint_writer* w = nullptr;
    REQUIRE(Q4_checkpoint_writer_create(&w) == Q4_OK);
    if (meta) REQUIRE(Q4_checkpoint_writer_metadata(w, "format", "pt") == Q4_OK);
    const std::string path = temp_path("empty");
    REQUIRE(Q4_checkpoint_writer_commit(w, path.c_str()) == Q4_OK);
    Q4_checkpoint_writer_destroy(w);
    Q4_checkpoint* c = nullptr;
    REQUIRE(Q4_checkpoint_open(path.c_str(), &c) == Q4_OK);
    size_t n = 7;
    REQUIRE(Q4_checkpoint_count(c, &n) == Q4_OK);
    CHECK(n == 0);
    size_t needed = 0;
    char buf[8];
    CHECK(Q4_checkpoint_metadata(c, "format", buf, sizeof buf, &needed) == (meta ? Q4_OK : Q4_ERR_NOT_FOUND));
    Q4_checkpoint_close(c);
    std::remove(path.c_str());
  }
  // Strings that are not UTF-8 are refused where they are given, naming the
  // argument (they failed as an internal error at commit), and the writer
  // stays usable.
  Tensor f({2}, t::f32());
  f.set(0, 1.0f);
  f.set(1, 2.0f);
  Q4_checkpoint_writer* w = nullptr;
  REQUIRE(Q4_checkpoint_writer_create(&w) == Q4_OK);
  CHECK(Q4_checkpoint_writer_add(w, "bad\xff", Q4_DTYPE_F32, f.t()) == Q4_ERR_INVALID_ARGUMENT);
  CHECK(std::string(Q4_last_error()).find("name") != std::string::npos);
  CHECK(Q4_checkpoint_writer_add(w, "bad\xc0\xaf", Q4_DTYPE_F32, f.t()) ==
        Q4_ERR_INVALID_ARGUMENT);  // overlong
  CHECK(Q4_checkpoint_writer_metadata(w, "k\xfe", "v") == Q4_ERR_INVALID_ARGUMENT);
  CHECK(std::string(Q4_last_error()).find("key") != std::string::npos);
  CHECK(Q4_checkpoint_writer_metadata(w, "k", "\xed\xa0\x80") == Q4_ERR_INVALID_ARGUMENT);  // a surrogate
  CHECK(std::string(Q4_last_error()).find("value") != std::string::npos);
  // Many tensors (a shard of a mixture of experts holds tens of thousands):
  // every name kept, duplicates still refused.
  constexpr int kMany = 5000;
  for (int i = 0; i < kMany; ++i) {
    const std::string name = "model.layers." + std::to_string(i / 64) + ".experts." + std::to_string(i % 64) +
                             ".w\xc3\xa9ight";  // (UTF-8 é)
    REQUIRE(Q4_checkpoint_writer_add(w, name.c_str(), Q4_DTYPE_F32, f.t()) == Q4_OK);
  }
  CHECK(Q4_checkpoint_writer_add(w, "model.layers.3.experts.7.w\xc3\xa9ight", Q4_DTYPE_F32, f.t()) ==
        Q4_ERR_INVALID_ARGUMENT);
  const std::string path = temp_path("many");
  REQUIRE(Q4_checkpoint_writer_commit(w, path.c_str()) == Q4_OK);
  Q4_checkpoint_writer_destroy(w);
  Q4_checkpoint* c = nullptr;
  REQUIRE(Q4_checkpoint_open(path.c_str(), &c) == Q4_OK);
  size_t n = 0;
  REQUIRE(Q4_checkpoint_count(c, &n) == Q4_OK);
  CHECK(n == static_cast<size_t>(kMany));
  size_t idx = 0;
  REQUIRE(Q4_checkpoint_find(c, "model.layers.77.experts.8.w\xc3\xa9ight", &idx) == Q4_OK);
  DLTensor v{};
  REQUIRE(Q4_checkpoint_tensor(c, idx, &v) == Q4_OK);
  CHECK(static_cast<const float*>(v.data)[1] == 2.0f);
  Q4_checkpoint_close(c);
  std::remove(path.c_str());
}

TEST_CASE("opening what is not a regular file is refused at once", "[checkpoint]") {
  char tmpl[] = "/tmp/nvfp4-special-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, fifo = dir + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A FIFO with no writer (opening it for reading used to wait for one),
  // a directory, a character device.
  for (const std::string& path : {fifo, dir, std::string("/dev/zero")}) {
    INFO(path);
    Q4_checkpoint* c = nullptr;
    CHECK(Q4_checkpoint_open(path.c_str(), &c) == Q4_ERR_IO);
    CHECK(std::string(Q4_last_error()).find("not a regular file") != std::string::npos);
    CHECK(c == nullptr);
  }
  ::remove(fifo.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("linears load from each family with its global-scale convention", "[checkpoint]") {
  const int64_t n = 32, k = 64;
  Tensor w = t::random_float({n, k}, t::f32(), 5);
  Tensor q({n, k / 2}, t::u8()), s({n, k / 16}, t::e4m3());
  float g = 0;
  REQUIRE(NVFP4_quantize(w.t(), q.t(), s.t(), 0, 0.0f, &g, nullptr) == Q4_OK);
  Tensor x = t::random_float({2, k}, t::f32(), 6);
  Tensor ref({2, n}, t::f32());
  REQUIRE(NVFP4_linear(x.t(), q.t(), s.t(), 0, g, nullptr, ref.t(), nullptr) == Q4_OK);
  Tensor gs({}, t::f32());
  gs.set(0, g);
  Tensor inv({1}, t::f32());
  inv.set(0, 1.0f / g);
  struct Family {
    const char* weight;
    const char* scale;
    const char* global;
    Tensor* global_t;
  };
  Family fams[] = {{"l.weight", "l.weight_scale", "l.weight_scale_2", &gs},
                   {"l.weight_packed", "l.weight_scale", "l.weight_global_scale", &inv}};
  Q4_session* session = nullptr;
  REQUIRE(Q4_session_create(t::cpu_session(), &session) == Q4_OK);
  for (const Family& fam : fams) {
    Q4_checkpoint_writer* wr = nullptr;
    REQUIRE(Q4_checkpoint_writer_create(&wr) == Q4_OK);
    REQUIRE(Q4_checkpoint_writer_add(wr, fam.weight, Q4_DTYPE_U8, q.t()) == Q4_OK);
    REQUIRE(Q4_checkpoint_writer_add(wr, fam.scale, Q4_DTYPE_F8_E4M3, s.t()) == Q4_OK);
    REQUIRE(Q4_checkpoint_writer_add(wr, fam.global, Q4_DTYPE_F32, fam.global_t->t()) == Q4_OK);
    const std::string path = temp_path("family");
    REQUIRE(Q4_checkpoint_writer_commit(wr, path.c_str()) == Q4_OK);
    Q4_checkpoint_writer_destroy(wr);
    Q4_checkpoint* c = nullptr;
    REQUIRE(Q4_checkpoint_open(path.c_str(), &c) == Q4_OK);
    Q4_schema_summary sum{};
    sum.struct_size = sizeof sum;
    REQUIRE(Q4_checkpoint_detect(c, &sum) == Q4_OK);
    CHECK(sum.num_linears == 1);
    Q4_linear* l = nullptr;
    REQUIRE(Q4_checkpoint_linear_create(session, c, "l", &l) == Q4_OK);
    Tensor y({2, n}, t::f32());
    REQUIRE(Q4_linear_forward(l, x.t(), y.t()) == Q4_OK);
    for (int64_t i = 0; i < 2 * n; ++i)
      CHECK(std::fabs(y.get(i) - ref.get(i)) <= 1e-5f * (1 + std::fabs(ref.get(i))));
    Q4_linear_destroy(l);
    Q4_linear* none = nullptr;
    CHECK(Q4_checkpoint_linear_create(session, c, "nope", &none) == Q4_ERR_NOT_FOUND);
    CHECK(none == nullptr);
    Q4_checkpoint_close(c);
    std::remove(path.c_str());
  }
  CHECK(Q4_session_destroy(session) == Q4_OK);  // every linear was released
}
