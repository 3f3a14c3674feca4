// The writer thread's wake-up pipe: recording threads (and signal handlers) write a byte to wake
// it before its period ends. The job may close any descriptor and get the number back for a file of
// its own (os.closerange, then open), so both ends live high (proto/fd_guard.h) and each use checks
// that the descriptor is still the pipe's: a stale end is never written to, read from or closed,
// and the writer makes a new pipe when its end went away.
#pragma once

#include <atomic>
#include <cstdint>

namespace fp8audit::agent {

class WakePipe {
 public:
  WakePipe() = default;
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;

  // Creates the pipe (non-blocking, close-on-exec). False when it cannot.
  bool Open();
  // Wakes the waiting writer. Any thread, signal handlers too: a write of one byte, nothing when
  // the write end is no longer the pipe's (the writer then wakes at its period).
  void Wake();
  // The writer thread: waits until woken or `timeout_ms` passed, then drains what woke it. A pipe
  // the job closed (an end no longer the pipe's) is replaced first; without one it just sleeps.
  void Wait(int timeout_ms);
  // A forked child: the parent's pipe is shared with it, so the child makes its own (closing the
  // inherited ends that are still the pipe's). False when it cannot.
  bool ReopenInChild();

 private:
  struct End {
    std::atomic<int> fd{-1};
    std::atomic<uint64_t> dev{0};
    std::atomic<uint64_t> ino{0};
    void Set(int fd);
    bool Ours() const;  // the descriptor still refers to the pipe end it was
    void CloseIfOurs();
  };
  End read_, write_;
};

}  // namespace fp8audit::agent
