// Atomic replacement of a file: the bytes go to a new file beside it, which
// is fsync'ed and renamed over the path, so a reader (or a process holding
// the old file mapped) sees either the old or the new file, never a part.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace q4::io {

struct ByteRange {
  const void* data;
  size_t size;
};

struct ReplaceError {
  int err = 0;        // errno of the failed step; 0 when the file was written
  std::string where;  // which step failed, e.g. "cannot create a temporary file in '/x'"
};

// Writes `pieces` in order to `path`. A new file gets the mode open(2) would
// give it (0666 less the process's umask); replacing a regular file keeps
// that file's permission bits (a symbolic link at `path` is replaced, not
// followed). The descriptor is close-on-exec. On failure `path` is
// unchanged and the temporary file is removed.
ReplaceError replace_file(const std::string& path, const std::vector<ByteRange>& pieces);

}  // namespace q4::io
