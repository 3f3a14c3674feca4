#include "agent/src/wake_pipe.h"

#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "proto/fd_guard.h"

namespace fp8audit::agent {

void WakePipe::End::Set(int new_fd) {
  const FdIdentity id = FdIdentity::Of(new_fd);
  // A reader that sees a mixture of the old and new values finds no match and does nothing.
  dev.store(id.dev, std::memory_order_relaxed);
  ino.store(id.ino, std::memory_order_relaxed);
  fd.store(new_fd, std::memory_order_release);
}

bool WakePipe::End::Ours() const {
  const int f = fd.load(std::memory_order_acquire);
  return f >= 0 &&
         FdIdentity{dev.load(std::memory_order_relaxed), ino.load(std::memory_order_relaxed)}
             .Matches(f);
}

void WakePipe::End::CloseIfOurs() {
  if (Ours()) ::close(fd.load(std::memory_order_acquire));
  fd.store(-1, std::memory_order_release);
}

bool WakePipe::Open() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  read_.Set(MoveFdHigh(fds[0]));
  write_.Set(MoveFdHigh(fds[1]));
  return true;
}

void WakePipe::Wake() {
  if (!write_.Ours()) return;
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(write_.fd.load(std::memory_order_acquire), &b, 1);
}

void WakePipe::Wait(int timeout_ms) {
  if (!read_.Ours() || !write_.Ours()) {
    // The job closed an end (and may have reused its number): a new pipe, the old ends untouched
    // unless still the pipe's.
    read_.CloseIfOurs();
    write_.CloseIfOurs();
    if (!Open()) {
      timespec t{timeout_ms / 1000, (timeout_ms % 1000) * 1'000'000L};
      ::nanosleep(&t, nullptr);
      return;
    }
  }
  const int fd = read_.fd.load(std::memory_order_acquire);
  pollfd p{fd, POLLIN, 0};
  ::poll(&p, 1, timeout_ms);
  if (!read_.Ours()) return;  // closed while waiting: replaced at the next wait
  char drain[64];
  while (::read(fd, drain, sizeof(drain)) > 0) {
  }
}

bool WakePipe::ReopenInChild() {
  read_.CloseIfOurs();
  write_.CloseIfOurs();
  return Open();
}

}  // namespace fp8audit::agent
