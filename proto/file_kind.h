// What a path names when it is not a regular file, in the words of every "not a regular file
// (...)" message: trace inputs (proto/, reports/) and the agent's pattern file. Header-only and
// libc-only, for the agent's parts that link nothing else.
#pragma once

#include <sys/stat.h>

namespace fp8audit {

inline const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace fp8audit
