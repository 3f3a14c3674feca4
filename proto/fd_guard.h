// Descriptors kept open inside a process whose code does not know about them (the agent's trace
// and wake pipe in a job): the process may close any descriptor (os.closerange, close_range) and
// get the same number back for a file of its own. Such a descriptor is moved high, where a job's
// files are not allocated, and identified by device and inode before each use, so that nothing is
// written to, read from or closed on a descriptor the process reused. Header-only: system calls
// only, no allocation, no lock.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>

namespace fp8audit {

// The file a descriptor refers to.
struct FdIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;

  // Of `fd`; empty (ino 0) when `fd` is not open.
  static FdIdentity Of(int fd) {
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) return {};
    return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  }
  bool empty() const { return ino == 0 && dev == 0; }
  // Whether `fd` still refers to this file.
  bool Matches(int fd) const {
    if (empty()) return false;
    const FdIdentity now = Of(fd);
    return now.dev == dev && now.ino == ino;
  }
};

// The lowest number a moved descriptor takes: 32 below the soft limit on open files, at most 4064
// (a descriptor table of 4,096 entries).
inline int HighFdFloor() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 3;
  const rlim_t cap = 4096;
  const rlim_t top = limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur > cap ? cap : limit.rlim_cur;
  return top > 64 ? static_cast<int>(top - 32) : 3;
}

// Moves `fd` to a number at or above HighFdFloor() (close-on-exec) and closes the old one; returns
// the new number, or `fd` itself when it cannot be moved (no free number there).
inline int MoveFdHigh(int fd) {
  if (fd < 0) return fd;
  const int floor = HighFdFloor();
  if (fd >= floor) return fd;
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, floor);
  if (high < 0) return fd;
  ::close(fd);
  return high;
}

}  // namespace fp8audit
