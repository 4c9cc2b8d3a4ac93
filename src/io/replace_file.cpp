#include "io/replace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace q4::io {
namespace {

std::atomic<uint64_t> g_serial{0};

// A name no other writer uses now: pid, a per-process serial and the clock
// (O_EXCL settles any collision, e.g. with a stale file of a dead process).
std::string temp_name(const std::string& dir, int attempt) {
  const auto ticks = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[96];
  std::snprintf(buf, sizeof buf, "/.nvfp4-tmp-%ld-%llx-%llx-%d", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(g_serial.fetch_add(1, std::memory_order_relaxed)),
                static_cast<unsigned long long>(ticks & 0xffffffffffULL), attempt);
  return dir + buf;
}

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

ReplaceError replace_file(const std::string& path, const std::vector<ByteRange>& pieces) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = temp_name(dir == "/" ? std::string() : dir, attempt);
    // 0666: the umask applies, as to any file the process creates.
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST && errno != EINTR) break;
  }
  if (fd < 0) return {errno, "cannot create a temporary file in '" + dir + "'"};

  struct stat old {};
  if (::lstat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode)) ::fchmod(fd, old.st_mode & 0777);
  bool ok = true;
  for (const ByteRange& r : pieces) ok = ok && (r.size == 0 || write_all(fd, r.data, r.size));
  ok = ok && ::fsync(fd) == 0;
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return {err, "cannot write '" + path + "'"};
  }
  // The new directory entry made durable too; file systems that cannot
  // sync a directory say so with EINVAL, which changes nothing here.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

}  // namespace q4::io
